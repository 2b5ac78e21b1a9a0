"""The public tensor API: VTensor caches of logical shape [batch, seq, heads, head_dim].

A VTensor's memory is seq-major (strides ``{H*D, B*H*D, D, 1}``): the tokens at one position for the
whole batch are contiguous, so appending a token is one contiguous write into memory mapped on
demand. Results share storage with their input: ``append(cache, t)`` returns a longer tensor over
the same memory, and ``cache`` stays valid (it still sees its own, shorter, prefix). Appending to a
tensor that is shorter than another live view of the same cache copies first (copy-on-write), so no
live tensor ever sees its data change.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os

import paddle

from . import _ops

class VTensorError(RuntimeError):
    """An op refused a call; the message names the op and the problem. The cache is unchanged."""


class ReservationFullError(VTensorError):
    """The append needs more tokens than the cache's reservation (max_seq_len) holds."""


class VTensorOutOfMemoryError(VTensorError, MemoryError):
    """Physical memory (or the limit set with set_mapped_limit) ran out while mapping."""


_ERRORS = {"OutOfRange": ReservationFullError, "OutOfMemory": VTensorOutOfMemoryError}


def _run(op: str, *args):
    """Run a raw op, turning Paddle's OSError wrapper of our C++ errors into typed exceptions."""
    try:
        return getattr(_ops.ops(), op)(*args)
    except OSError as e:  # PD_THROW surfaces as OSError; its first line is "<op>: <Code>: <why>"
        text = str(e).strip().splitlines()[0].strip() if str(e).strip() else repr(e)
        code = text.split(": ")[1] if text.count(": ") >= 2 else ""
        raise _ERRORS.get(code, VTensorError)(text) from None


_PERM = [1, 0, 2, 3]  # logical [B, S, H, D] <-> storage [S, B, H, D]; a free view either way


@dataclasses.dataclass
class Config:
    """Defaults used when a call does not say: see :func:`configure`."""

    max_seq_len: int = int(os.environ.get("PADDLE_VTENSOR_MAX_SEQ_LEN", "4096"))
    chunk_bytes: int = int(os.environ.get("PADDLE_VTENSOR_CHUNK_BYTES", str(2 << 20)))


_config = Config()


def configure(max_seq_len: int | None = None, chunk_bytes: int | None = None) -> Config:
    """Set the defaults for new caches and return them.

    max_seq_len: tokens reserved (virtual address space only) per cache; appending past it is an
        error. Default 4096, or ``PADDLE_VTENSOR_MAX_SEQ_LEN``.
    chunk_bytes: physical memory is mapped in chunks of this size (rounded up to the device
        granularity: 2 MiB on current NVIDIA GPUs, the page size on CPUs). Default 2 MiB, or
        ``PADDLE_VTENSOR_CHUNK_BYTES``.
    """
    if max_seq_len is not None:
        if int(max_seq_len) <= 0:
            raise ValueError(f"max_seq_len must be positive, got {max_seq_len}")
        _config.max_seq_len = int(max_seq_len)
    if chunk_bytes is not None:
        if int(chunk_bytes) <= 0:
            raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
        _config.chunk_bytes = int(chunk_bytes)
    return dataclasses.replace(_config)


def _attrs(max_seq_len: int | None, chunk_bytes: int | None) -> tuple[int, int]:
    m = _config.max_seq_len if max_seq_len is None else int(max_seq_len)
    c = _config.chunk_bytes if chunk_bytes is None else int(chunk_bytes)
    if m <= 0:
        raise ValueError(f"max_seq_len must be positive, got {m}")
    if c <= 0:
        raise ValueError(f"chunk_bytes must be positive, got {c}")
    return m, c


def _check_rank4(x, what: str, op: str) -> None:
    if not isinstance(x, paddle.Tensor):
        raise TypeError(f"{op}: {what} must be a paddle.Tensor, got {type(x).__name__}")
    if x.ndim != 4:
        raise ValueError(f"{op}: {what} must have rank 4 [batch, seq, heads, head_dim], got shape {list(x.shape)}")


def storage_view(cache: paddle.Tensor) -> paddle.Tensor:
    """The cache as its memory is laid out, [S, B, H, D]; contiguous (and free) for a VTensor."""
    return paddle.transpose(cache, _PERM)


def _logical(storage: paddle.Tensor) -> paddle.Tensor:
    return paddle.transpose(storage, _PERM)


def from_dense(x: paddle.Tensor, max_seq_len: int | None = None, chunk_bytes: int | None = None) -> paddle.Tensor:
    """Copy a dense cache ``[B, S, H, D]`` into a new VTensor (the one copy of a migration).

    The reservation holds ``max(max_seq_len, S)`` tokens.
    """
    _check_rank4(x, "x", "from_dense")
    m, c = _attrs(max_seq_len, chunk_bytes)
    return _logical(_run("vtensor_from_dense", x, m, c))


def _prepare_cache(cache: paddle.Tensor, m: int, c: int) -> paddle.Tensor:
    # A plain tensor is migrated with from_dense (one copy); transposing it and letting the op
    # migrate would cost a second copy, since Paddle makes non-contiguous op inputs contiguous.
    storage = storage_view(cache)
    if is_vtensor(cache) and storage.is_contiguous():
        return storage
    return _run("vtensor_from_dense", cache.contiguous(), m, c)


def append(cache: paddle.Tensor, tokens: paddle.Tensor, max_seq_len: int | None = None,
           chunk_bytes: int | None = None) -> paddle.Tensor:
    """Append ``tokens`` ``[B, T, H, D]`` (T >= 1) to ``cache`` ``[B, S, H, D]``.

    Returns the VTensor ``[B, S + T, H, D]``. A cache that is not a VTensor is first copied into one
    whose reservation holds ``max(max_seq_len, S + T)`` tokens. Raises ValueError for a bad input,
    ReservationFullError past the reservation, VTensorOutOfMemoryError when physical memory runs
    out; the cache is unchanged in every case.
    """
    _check_rank4(cache, "cache", "append")
    _check_rank4(tokens, "tokens", "append")
    m, c = _attrs(max_seq_len, chunk_bytes)
    _check_match(cache, tokens, "vtensor_append")
    return _logical(_run("vtensor_append", _prepare_cache(cache, m, c), tokens, m, c))


def reserve_one_token(cache: paddle.Tensor, token: paddle.Tensor, max_seq_len: int | None = None,
                      chunk_bytes: int | None = None) -> paddle.Tensor:
    """Append one token ``[B, 1, H, D]`` to ``cache`` ``[B, S, H, D]``: the original op.

    Returns ``[B, S + 1, H, D]`` with strides ``{H*D, B*H*D, D, 1}``, sharing the cache's storage.
    """
    _check_rank4(cache, "cache", "reserve_one_token")
    _check_rank4(token, "token", "reserve_one_token")
    m, c = _attrs(max_seq_len, chunk_bytes)
    _check_match(cache, token, "vtensor_reserve_one_token")
    storage = _prepare_cache(cache, m, c)
    return _logical(_run("vtensor_reserve_one_token", storage, token, m, c))


def truncate(cache: paddle.Tensor, seq_len: int) -> paddle.Tensor:
    """A view of the first ``seq_len`` tokens of the VTensor ``cache``, without copying.

    Speculative decoding: append k draft tokens, then truncate to drop the rejected ones. The memory
    past ``seq_len`` is released once no live tensor sees it; later appends reuse it.
    """
    _check_rank4(cache, "cache", "truncate")
    if not is_vtensor(cache):
        raise ValueError("truncate: the cache is not a VTensor (make one with paddle_vtensor.from_dense or append)")
    seq_len = int(seq_len)
    if not 0 <= seq_len <= cache.shape[1]:
        raise ValueError(f"truncate: seq_len must be in [0, {cache.shape[1]}] (the cache's current length), got {seq_len}")
    return _logical(_run("vtensor_truncate", storage_view(cache), seq_len))


def _check_match(cache: paddle.Tensor, tokens: paddle.Tensor, op: str) -> None:
    # Checked here as well as in the op, because a plain cache is migrated before the op runs and a
    # bad call must not pay for (or leave behind) a migration.
    if cache.dtype != tokens.dtype:
        raise ValueError(f"{op}: tokens have dtype {tokens.dtype} but the cache has dtype {cache.dtype}")
    if cache.dtype not in (paddle.float32, paddle.float16, paddle.bfloat16):
        raise ValueError(f"{op}: the cache has dtype {cache.dtype}; supported KV cache dtypes are float32, float16 and bfloat16")
    if str(cache.place) != str(tokens.place):
        raise ValueError(f"{op}: tokens are on {tokens.place} but the cache is on {cache.place}")
    b, _, h, d = cache.shape
    tb, t, th, td = tokens.shape
    if (tb, th, td) != (b, h, d):
        raise ValueError(
            f"{op}: tokens [batch, tokens, heads, head_dim] = {list(tokens.shape)} do not match the cache "
            f"[batch, seq, heads, head_dim] = {list(cache.shape)} in batch, heads or head_dim")
    if t < 1:
        raise ValueError(f"{op}: tokens must hold at least one token, got shape {list(tokens.shape)}")
    if op == "vtensor_reserve_one_token" and t != 1:
        raise ValueError(f"{op}: expects exactly 1 token(s) per call ([batch, 1, heads, head_dim]), got shape {list(tokens.shape)}")


def _cache_info(x: paddle.Tensor):
    # Metadata only: even x.numel() runs an op, which first copies a non-contiguous VTensor whole.
    if not isinstance(x, paddle.Tensor):
        return None
    out = (ctypes.c_int64 * 6)()
    try:
        ptr = x.data_ptr()
    except Exception:  # a tensor without storage
        return None
    if not _ops.lib().pvt_find_cache(ctypes.c_void_p(ptr), out):
        return None
    return tuple(out)


def is_vtensor(x) -> bool:
    """True when ``x``'s memory lies in a VTensor cache (the result of append/from_dense/truncate,
    or a view of one)."""
    return _cache_info(x) is not None


_STAT_KEYS = ("reserved_bytes", "mapped_bytes", "peak_mapped_bytes", "live_regions", "live_vtensors",
              "map_calls", "unmap_calls", "mapped_limit", "bytes_written")


def _device(device) -> tuple[int, int]:
    """'cpu' / 'gpu' / 'gpu:N' / a Place -> (kind, index) as the C entry points take them."""
    name = str(paddle.device.get_device() if device is None else device).lower()
    if "cpu" in name:
        return 0, 0
    if "gpu" in name:
        digits = "".join(ch for ch in name.rsplit(":", 1)[-1] if ch.isdigit())
        return 1, int(digits or 0)
    raise ValueError(f"memory_stats: unsupported device {device!r} (use 'cpu' or 'gpu:N')")


def memory_stats(device=None) -> dict:
    """Counters of VTensor memory on ``device`` ('cpu', 'gpu:0'; default: paddle's current device).

    reserved_bytes (virtual), mapped_bytes (physical, now), peak_mapped_bytes, live_regions (caches),
    live_vtensors (tensors made by the ops that are still alive; Paddle views of them share one),
    map_calls / unmap_calls (chunks), mapped_limit (0: none), bytes_written (bytes the ops' kernels
    wrote into caches since start: appends, migrations, copy-on-write copies).
    """
    kind, index = _device(device)
    out = (ctypes.c_int64 * len(_STAT_KEYS))()
    _ops.lib().pvt_memory_stats(kind, index, out)
    return dict(zip(_STAT_KEYS, (int(v) for v in out)))


def set_mapped_limit(limit_bytes: int | None, device=None) -> None:
    """Cap the physical memory VTensors may map on ``device`` (None or 0: no cap). Appends that
    would pass it fail with an out-of-memory error and leave the cache unchanged."""
    kind, index = _device(device)
    _ops.lib().pvt_set_mapped_limit(kind, index, int(limit_bytes or 0))


def reset_peak_mapped(device=None) -> None:
    kind, index = _device(device)
    _ops.lib().pvt_reset_peak_mapped(kind, index)
