"""A numpy reference of the 8-bit caches (custom_ops/kernels/kv_quant.h), written independently of
the C++ encoder: e4m3 by nearest value in the table of all representable values (ties to the even
code), not by bit manipulation; int8 by numpy's own rint. Shared by the quantization tests."""
import numpy as np


def _e4m3_positive_values() -> np.ndarray:
    """Values of codes 0..126 (0x7F is NaN): subnormals m * 2^-9, normals (1 + m/8) * 2^(e-7)."""
    vals = []
    for code in range(127):
        e, m = code >> 3, code & 7
        vals.append(m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(vals, dtype=np.float64)


E4M3 = _e4m3_positive_values()  # increasing with the code


def e4m3_decode(codes: np.ndarray) -> np.ndarray:
    codes = np.asarray(codes, dtype=np.uint8)
    mag = np.where((codes & 0x7F) == 0x7F, np.nan, E4M3[np.minimum(codes & 0x7F, 126)])
    return np.where(codes & 0x80, -mag, mag)


def e4m3_encode(x: np.ndarray) -> np.ndarray:
    """float32 -> e4m3fn codes: nearest, ties to even, |x| >= 448 saturates, NaN -> sign | 0x7F."""
    x = np.asarray(x, dtype=np.float32)
    sign = np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    a = np.abs(x.astype(np.float64))
    hi = np.clip(np.searchsorted(E4M3, np.where(np.isnan(a), 0, a)), 1, 126)
    lo = hi - 1
    d_lo, d_hi = a - E4M3[lo], E4M3[hi] - a
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(a >= 448, 126, code)
    code = np.where(np.isnan(a), 0x7F, code)
    return (code.astype(np.uint8) | sign).astype(np.uint8)


def int8_scales(x: np.ndarray) -> np.ndarray:
    """Per-row (last axis) scale amax / 127 in float32; NaN values ignored."""
    x = np.asarray(x, dtype=np.float32)
    amax = np.fmax.reduce(np.abs(x), axis=-1, initial=0.0).astype(np.float32)
    return (amax / np.float32(127)).astype(np.float32)


def int8_encode(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """x [..., D] float32, scale [...] float32: rint(x / scale) clipped to +-127; NaN or scale 0 -> 0."""
    x = np.asarray(x, dtype=np.float32)
    s = np.asarray(scale, dtype=np.float32)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint(x / np.where(s > 0, s, np.float32(1)))  # float32 division, as the kernel
    q = np.clip(np.nan_to_num(q, nan=0.0, posinf=127, neginf=-127), -127, 127)
    return np.where(s > 0, q, 0).astype(np.int8)


def quantize(x: np.ndarray, cache_dtype: str, fp8_scale=None):
    """x [B, S, H, D] float32 -> (codes, scale) as the cache holds them (scale [H] or [B, S, H])."""
    x = np.asarray(x, dtype=np.float32)
    if cache_dtype == "int8":
        s = int8_scales(x)
        return int8_encode(x, s), s
    s = np.asarray(fp8_scale, dtype=np.float32)
    return e4m3_encode(x / s[None, None, :, None]), s


def dequantize(codes: np.ndarray, scale: np.ndarray, cache_dtype: str) -> np.ndarray:
    """float64 values of a cache [B, S, H, D]."""
    if cache_dtype == "int8":
        return codes.astype(np.float64) * np.asarray(scale, np.float64)[..., None]
    return e4m3_decode(codes) * np.asarray(scale, np.float64)[None, None, :, None]
