"""The public tensor API: VTensor caches of logical shape [batch, seq, heads, head_dim].

A VTensor's memory is seq-major (strides ``{H*D, B*H*D, D, 1}``): the tokens at one position for
the whole batch are contiguous, so appending a token is one contiguous write into memory mapped on
demand. Results share storage with their input: ``append(cache, t)`` returns a longer tensor over
the same memory, and ``cache`` stays valid (it still sees its own, shorter, prefix). Appending to a
tensor that is shorter than another live view of the same cache copies first (copy-on-write), so no
live tensor ever sees its data change.

Host cost: on a GPU at small batch a decode step is bound by the host, so these functions do as
little Python as they can (issue 13, docs/PERFORMANCE.md "Host cost per call"):

* The C++ ops check every input; this module passes arguments straight through and turns a refusal
  into an exception by the one table of :mod:`paddle_vtensor.errors`. Python checks only what the
  ops cannot see: that an int is an int that fits in 64 bits, and gradients.
* Paddle's custom-op dispatch costs about a paddle.concat, and copies every non-contiguous input (the
  ops therefore take the cache as its storage view ``[S, B, H, D]``). For eager VTensor inputs the
  functions call the ops' own C++ functions directly instead (``custom_ops/paddle/fast_calls.cc``):
  the logical VTensor goes in as it is, no transpose, no registry lookup. Anything else (a plain
  cache to migrate, a bad argument) takes the op the ordinary way.

Errors (paddle_vtensor.errors): a refusal at an op's entry, ``"<op>: <why>"``, is a bad input and
raises ``ValueError``; a failing core call, ``"<op>: <Code>: <why>"``, raises ``errors.ERRORS[Code]``;
an argument that is not a tensor (or not an int) raises ``TypeError``. The cache is unchanged in
every case.
"""
from __future__ import annotations

import dataclasses
import operator

import paddle
from paddle import _C_ops  # transpose only: Paddle's own op, the cheapest free view

from . import _env, _ops, errors, quant
from ._op_names import (PVT_OP_APPEND, PVT_OP_FROM_DENSE, PVT_OP_RESERVE_ONE_TOKEN, PVT_OP_TRUNCATE)


def _failure(fn: str, error: Exception, tensors: dict) -> Exception:
    """The exception that a failed call of ``fn`` raises, from what the op (or Paddle) raised.
    Runs only after a failure, so it may take its time."""
    for name, x in tensors.items():
        if x is not None or name != "attn_mask":
            if not isinstance(x, paddle.Tensor):  # Paddle refused it (by position) before any op ran
                optional = " or None" if name == "attn_mask" else ""
                return TypeError(f"{fn}: {name} must be a paddle.Tensor{optional}, got {type(x).__name__}")
    return errors.from_op_error(error)


_INT64_END = 1 << 63
_INT_DTYPES = (paddle.int8, paddle.int16, paddle.int32, paddle.int64, paddle.uint8)


def _int(fn: str, name: str, value, lo: int = -_INT64_END, hi: int = _INT64_END - 1,
         out_of_range: type[Exception] = ValueError) -> int:
    """``value`` as an int in ``[lo, hi]`` (default: what the ops' int64 attributes hold), checked
    before any cast: Paddle would silently wrap 2**63 to -1, ctypes 2**64 to 0, ``int(2.9)`` is 2.
    A Python int, a numpy integer or a one-element integer tensor; TypeError for anything else (a
    float, a bool, a string), ``out_of_range`` outside ``[lo, hi]``. The one such check of the
    package (slots.py and generation/ use it too)."""
    if type(value) is not int:
        if isinstance(value, paddle.Tensor):
            if value.dtype not in _INT_DTYPES or value.size != 1:
                raise TypeError(f"{fn}: {name} must be an int, got a {value.dtype} tensor of shape {value.shape}")
            value = int(value.item())
        else:
            try:  # numpy integers; numpy bools and floats (and a float 0-d array) have no index
                index = None if isinstance(value, bool) else operator.index(value)
            except TypeError:
                index = None
            if index is None:
                raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__} {value!r}")
            value = index
    if not lo <= value <= hi:
        if (lo, hi) == (-_INT64_END, _INT64_END - 1):
            raise out_of_range(f"{fn}: {name}={value} does not fit in 64 bits")
        raise out_of_range(f"{fn}: {name} must be in [{lo}, {hi}], got {value}")
    return value


def _no_gradients(fn: str, *tensors) -> None:
    if paddle.is_grad_enabled() and not all(t.stop_gradient for t in tensors):
        raise ValueError(
            f"{fn}: an input requires gradients (stop_gradient=False) but VTensor ops carry none; call it "
            f"under paddle.no_grad() or pass x.detach()")


_PERM = [1, 0, 2, 3]  # logical [B, S, H, D] <-> storage [S, B, H, D]; a free view either way


@dataclasses.dataclass
class Config:
    """Defaults used when a call does not say: see :func:`configure`."""

    max_seq_len: int = _env.max_seq_len()
    chunk_bytes: int = _env.chunk_bytes()


_config = Config()


def _positive(name: str, value) -> int:
    value = _int("configure", name, value)
    if value <= 0:
        raise ValueError(f"configure: {name} must be positive, got {value}")
    return value


def configure(max_seq_len: int | None = None, chunk_bytes: int | None = None) -> Config:
    """Set the defaults for new caches and return them.

    max_seq_len: tokens reserved (virtual address space only) per cache; appending past it is an
        error. Default 4096, or ``PADDLE_VTENSOR_MAX_SEQ_LEN``.
    chunk_bytes: physical memory is mapped in chunks of this size (rounded up to the device
        granularity: 2 MiB on current NVIDIA GPUs, the page size on CPUs). Default 2 MiB, or
        ``PADDLE_VTENSOR_CHUNK_BYTES``.
    """
    if max_seq_len is not None:
        _config.max_seq_len = _positive("max_seq_len", max_seq_len)
    if chunk_bytes is not None:
        _config.chunk_bytes = _positive("chunk_bytes", chunk_bytes)
    return dataclasses.replace(_config)


def _storage(x):
    s = _ops.fast().storage(x)  # a whole VTensor view: its storage view, without an op
    if s is not None:
        return s
    # Not rank 4: passed as it is, for the op to refuse in its own words.
    return _C_ops.transpose(x, _PERM) if len(x.shape) == 4 else x


def storage_view(cache: paddle.Tensor) -> paddle.Tensor:
    """The cache as its memory is laid out, [S, B, H, D]; contiguous (and free) for a VTensor."""
    return _storage(cache)


def _logical(storage: paddle.Tensor) -> paddle.Tensor:
    return _C_ops.transpose(storage, _PERM)


def _setting(fn: str, name: str, value, default: int) -> int:
    # None or 0: `default`; anything else goes to the op, which refuses a negative value.
    return (_int(fn, name, value) if value is not None else 0) or default


def from_dense(x: paddle.Tensor, max_seq_len: int | None = None, chunk_bytes: int | None = None,
               cache_dtype=None, scale: paddle.Tensor | None = None) -> paddle.Tensor:
    """Copy a dense cache ``[B, S, H, D]`` into a new VTensor (the one copy of a migration).

    The reservation holds ``max(max_seq_len, S)`` tokens; ``max_seq_len`` and ``chunk_bytes`` None
    or 0 mean the defaults of :func:`configure`. ``cache_dtype`` 'float8_e4m3fn' or 'int8' makes
    an 8-bit cache (:mod:`paddle_vtensor.quant`): x is quantized; ``scale`` is the fp8 cache's
    float32 ``[H]`` per-kv-head scale (None: calibrated from x, amax / 448), never given for int8.
    """
    try:
        _no_gradients("from_dense", x)
        name = quant.cache_dtype_name("from_dense", cache_dtype)
        m = _setting("from_dense", "max_seq_len", max_seq_len, _config.max_seq_len)
        c = _setting("from_dense", "chunk_bytes", chunk_bytes, _config.chunk_bytes)
        if name is not None:
            return quant.from_dense(x, name, scale, m, c)
        if scale is not None:
            raise ValueError("from_dense: scale is for 8-bit caches only (give cache_dtype=)")
        out = _ops.run(PVT_OP_FROM_DENSE, x, m, c)[0]
    except Exception as e:
        raise _failure("from_dense", e, {"x": x}) from None
    return _logical(out)


def _migrate(fn: str, cache, tokens, max_seq_len, chunk_bytes):
    """The storage view to append to when the fast path declined ``cache``: the cache itself if it
    is a VTensor (a view the fast path does not take), else a VTensor copy of it reserving
    max(max_seq_len, S + T)."""
    rank4 = len(cache.shape) == 4  # else from_dense refuses it, in its own words
    if rank4 and _cache_info(cache) is not None:
        storage = _C_ops.transpose(cache, _PERM)
        if storage.is_contiguous():
            return storage
    m = _setting(fn, "max_seq_len", max_seq_len, _config.max_seq_len)
    c = _setting(fn, "chunk_bytes", chunk_bytes, _config.chunk_bytes)
    if m > 0 and rank4 and isinstance(tokens, paddle.Tensor) and len(tokens.shape) == 4:
        m = max(m, cache.shape[1] + tokens.shape[1])  # the migrated cache must hold this append too
    # One copy: a transposed plain tensor would be made contiguous by Paddle, then copied again.
    return _ops.run(PVT_OP_FROM_DENSE, cache.contiguous(), m, c)[0]


def _append(fn: str, op: str, expect: int, cache, tokens, max_seq_len, chunk_bytes, cache_dtype=None,
            scale=None) -> paddle.Tensor:
    storage = None
    try:
        if paddle.is_grad_enabled() and not (cache.stop_gradient and tokens.stop_gradient):
            _no_gradients(fn, cache, tokens)
        # 0: the op keeps the cache's own settings if it has to copy (a fork), see append().
        m = 0 if max_seq_len is None else _int(fn, "max_seq_len", max_seq_len)
        c = 0 if chunk_bytes is None else _int(fn, "chunk_bytes", chunk_bytes)
        if cache_dtype is not None or scale is not None or quant.is_quantized(cache):
            return _quant_append(fn, expect, cache, tokens, m, c, max_seq_len, chunk_bytes, cache_dtype, scale)
        out = _ops.fast().append(cache, tokens, m, c, expect)
        if out is not None:
            return out
        storage = _migrate(fn, cache, tokens, max_seq_len, chunk_bytes)
        out = _ops.run(op, storage, tokens, m, c)[0]
    except Exception as e:
        storage = None  # a migrated copy is freed now, not when the traceback is
        raise _failure(fn, e, {"cache": cache, "tokens": tokens}) from None
    return _logical(out)


def _quant_append(fn, expect, cache, tokens, m, c, max_seq_len, chunk_bytes, cache_dtype, scale):
    """Append to an 8-bit cache, or migrate a float cache into one first (cache_dtype given)."""
    name = quant.cache_dtype_name(fn, cache_dtype)
    if quant.is_quantized(cache):
        have = quant.cache_dtype_name(fn, cache.dtype)
        if name not in (None, have) or scale is not None:
            raise ValueError(f"{fn}: the cache is already {have} with its own scale; give neither another "
                             f"cache_dtype ({name!r}) nor a scale")
        return quant.append(cache, tokens, m, c, expect)
    if name is None:
        raise ValueError(f"{fn}: scale is for 8-bit caches only (give cache_dtype=)")
    if not isinstance(cache, paddle.Tensor) or not isinstance(tokens, paddle.Tensor):
        raise TypeError(f"{fn}: cache and tokens must be paddle.Tensors")
    # A float cache migrates once into an 8-bit one whose reservation holds this append too.
    mm = _setting(fn, "max_seq_len", max_seq_len, _config.max_seq_len)
    if len(cache.shape) == 4 and len(tokens.shape) == 4:
        mm = max(mm, cache.shape[1] + tokens.shape[1])
    migrated = quant.from_dense(cache, name, scale, mm, _setting(fn, "chunk_bytes", chunk_bytes, _config.chunk_bytes))
    return quant.append(migrated, tokens, m, c, expect)


def append(cache: paddle.Tensor, tokens: paddle.Tensor, max_seq_len: int | None = None,
           chunk_bytes: int | None = None, cache_dtype=None, scale: paddle.Tensor | None = None) -> paddle.Tensor:
    """Append ``tokens`` ``[B, T, H, D]`` (T >= 1) to ``cache`` ``[B, S, H, D]``.

    Returns the VTensor ``[B, S + T, H, D]``. A cache that is not a VTensor is first copied into one
    whose reservation holds ``max(max_seq_len, S + T)`` tokens (``max_seq_len``, ``chunk_bytes``
    None or 0: the defaults of :func:`configure`). When the append must copy a VTensor (another
    live view already sees position S: copy-on-write), the copy keeps the source's max_seq_len and
    chunk_bytes unless given here. Raises ValueError for a bad input, ReservationFullError past the
    reservation, VTensorOutOfMemoryError when physical memory runs out; the cache is unchanged in
    every case.

    8-bit caches (:mod:`paddle_vtensor.quant`): an 8-bit cache takes float tokens and quantizes
    them; a float cache with ``cache_dtype`` 'float8_e4m3fn' or 'int8' is first migrated into an
    8-bit cache (``scale``: the fp8 scale ``[H]``, None: calibrated from the cache).
    """
    return _append("append", PVT_OP_APPEND, 0, cache, tokens, max_seq_len, chunk_bytes, cache_dtype, scale)


def reserve_one_token(cache: paddle.Tensor, token: paddle.Tensor, max_seq_len: int | None = None,
                      chunk_bytes: int | None = None, cache_dtype=None, scale: paddle.Tensor | None = None
                      ) -> paddle.Tensor:
    """Append one token ``[B, 1, H, D]`` to ``cache`` ``[B, S, H, D]``: the original op.

    Returns ``[B, S + 1, H, D]`` with strides ``{H*D, B*H*D, D, 1}``, sharing the cache's storage.
    Settings, 8-bit caches and errors as :func:`append`.
    """
    return _append("reserve_one_token", PVT_OP_RESERVE_ONE_TOKEN, 1, cache, token, max_seq_len, chunk_bytes,
                   cache_dtype, scale)


def truncate(cache: paddle.Tensor, seq_len: int) -> paddle.Tensor:
    """A view of the first ``seq_len`` tokens of the VTensor ``cache``, without copying.

    Speculative decoding: append k draft tokens, then truncate to drop the rejected ones. The memory
    past ``seq_len`` is released once no live tensor sees it; later appends reuse it. ValueError for
    a cache that is not a whole VTensor (a batch slice, a plain tensor) or seq_len outside [0, S].
    """
    try:
        if type(seq_len) is not int or not -_INT64_END <= seq_len < _INT64_END:
            seq_len = _int("truncate", "seq_len", seq_len)  # the op checks the range it takes
        if quant.is_quantized(cache):
            return quant.truncate(cache, seq_len, _truncate_vtensor)
        out = _truncate_vtensor(cache, seq_len)
    except Exception as e:
        raise _failure("truncate", e, {"cache": cache}) from None
    return out


def _truncate_vtensor(cache, seq_len: int) -> paddle.Tensor:
    out = _ops.fast().truncate(cache, seq_len)
    return out if out is not None else _logical(_ops.run(PVT_OP_TRUNCATE, _storage(cache), seq_len)[0])


def _cache_info(x: paddle.Tensor):
    # Metadata only: even x.numel() runs an op, which first copies a non-contiguous VTensor whole.
    if not isinstance(x, paddle.Tensor):
        return None
    try:
        ptr = x.data_ptr()
    except Exception:  # a tensor without storage
        return None
    return _ops.c.find_cache(ptr)


def is_vtensor(x) -> bool:
    """True when ``x``'s memory lies in a VTensor cache (the result of append/from_dense/truncate,
    or a view of one)."""
    return _ops.fast().is_view(x) or _cache_info(x) is not None


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
    wrote into caches since start: appends, migrations, copy-on-write copies), shared_bytes (further
    mappings of shared chunks), pooled_bytes (physical chunks kept ready in the pool, mapped nowhere:
    paddle_vtensor/pool.py).
    """
    return _ops.c.memory_stats(*_device(device))


def set_mapped_limit(limit_bytes: int | None, device=None) -> None:
    """Cap the physical memory VTensors may map on ``device`` (None or 0: no cap): mapped plus pooled
    bytes (a map that would pass it gives the pool back first, paddle_vtensor/pool.py). Appends that
    would still pass it fail with an out-of-memory error and leave the cache unchanged."""
    kind, index = _device(device)
    limit = 0 if limit_bytes is None else _int("set_mapped_limit", "limit_bytes", limit_bytes)
    code, text = _ops.c.set_mapped_limit(kind, index, limit)
    if code:
        raise errors.from_status("set_mapped_limit", text)


def reset_peak_mapped(device=None) -> None:
    _ops.c.reset_peak_mapped(*_device(device))
