"""The extension's interface (pvt_torch.cu: Cache, attention, workspace_bytes, speculative_accept,
mapped_bytes_total) over build/spec_capi/libpvt_spec.so (spec_capi.cu) through ctypes: built on a machine
without a GPU by spec_capi_build.sh and carried, so the GPU machine compiles nothing. Same argument order
and meaning as pvt_torch's functions; every call is queued on PyTorch's current stream (graph capture
included)."""
import ctypes
import os

import torch

_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "spec_capi", "libpvt_spec.so")
_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_TYPESTR = {torch.float32: "<f4", torch.float16: "<f2", torch.bfloat16: "<V2"}
_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_I64 = ctypes.c_int64
_P = ctypes.c_void_p


def _arr(ctype, values):
    return (ctype * len(values))(*values)


class _Blob:
    """What torch.as_tensor reads a device pointer through (no stream: nothing is synchronized)."""

    def __init__(self, ptr, shape, dtype):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": tuple(shape), "typestr": _TYPESTR[dtype],
                                         "strides": None, "version": 3, "stream": None}


class CApi:
    def __init__(self, path=_LIB):
        ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)  # the core's driver calls resolve here
        lib = self.lib = ctypes.CDLL(path)
        lib.pvt_capi_error.restype = ctypes.c_char_p
        lib.pvt_capi_cache_data.restype = _P
        lib.pvt_capi_mapped_bytes_total.restype = _I64
        for name in ("cache_destroy", "cache_data", "cache_reserve", "cache_begin_append"):
            getattr(lib, f"pvt_capi_{name}").argtypes = [_P] + ([_I64] * {"cache_reserve": 1, "cache_begin_append": 2}.get(name, 0))
        api = self

        class Cache:
            """A SeqMajorCache [capacity, B, H, D]; tensor() sees the whole reservation (map before touching)."""

            def __init__(self, batch, heads, head_dim, dtype, capacity):
                self.dtype = _NAMES[dtype]
                self.shape = (capacity, batch, heads, head_dim)
                h = _P()
                api._check(lib.pvt_capi_cache_create(torch.cuda.current_device(), _I64(batch), _I64(heads), _I64(head_dim),
                                                     _I64(torch.finfo(self.dtype).bits // 8), _I64(capacity), ctypes.byref(h)))
                self.h = h

            def tensor(self):
                return torch.as_tensor(_Blob(lib.pvt_capi_cache_data(self.h), self.shape, self.dtype), device="cuda")

            def reserve(self, end):
                api._check(lib.pvt_capi_cache_reserve(self.h, _I64(end)))

            def begin_append(self, pos, n):
                api._check(lib.pvt_capi_cache_begin_append(self.h, _I64(pos), _I64(n)))

            def __del__(self):
                if getattr(self, "h", None):  # not after a failed create
                    lib.pvt_capi_cache_destroy(self.h)

        self.Cache = Cache

    def _check(self, rc):
        if rc != 0:
            raise RuntimeError(self.lib.pvt_capi_error().decode())

    @staticmethod
    def _attention_args(q, k, v, out, kv_len, cache_seqlens):
        dims = _arr(_I64, [q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], kv_len, _DTYPES[q.dtype]])
        if cache_seqlens is not None:
            assert cache_seqlens.dtype == torch.int32 and cache_seqlens.is_contiguous() and cache_seqlens.is_cuda
        ptrs = _arr(_P, [q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                         None if cache_seqlens is None else cache_seqlens.data_ptr()])
        strides = _arr(_I64, [*q.stride(), *k.stride(), *v.stride(), *out.stride()])
        return dims, ptrs, strides

    _OPTIONS = ("splits", "no_mma", "mma_mha", "mma_warps", "no_pdl", "no_cluster", "mma_blocks_per_sm", "split_keys",
                "mma_row_tiles", "balance", "balance_blocks_per_sm", "merge_chunk", "mma_row_warps", "merge_wide",
                "mma_warp_keys")
    _OPTION_DEFAULTS = (0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0)  # DecodeOptions' defaults

    def set_decode_options(self, **options):
        """pvt_torch's set_decode_options: the DecodeOptions every later plan uses (none: the defaults)."""
        unknown = set(options) - set(self._OPTIONS)
        if unknown:
            raise TypeError(f"set_decode_options: unknown options {sorted(unknown)}")
        values = [int(options.get(n, d)) for n, d in zip(self._OPTIONS, self._OPTION_DEFAULTS)]
        self._check(self.lib.pvt_capi_set_decode_options(_arr(_I64, values)))

    def workspace_bytes(self, q, k, v, out, kv_len, cache_seqlens=None):
        n = _I64()
        self._check(self.lib.pvt_capi_attention_workspace(*self._attention_args(q, k, v, out, kv_len, cache_seqlens),
                                                          ctypes.byref(n)))
        return n.value

    def plan(self, q, k, v, out, kv_len, cache_seqlens=None):
        """pvt_torch's plan: the kernel family, M-tiles, warps, splits, cluster, balanced grid, workspace, the
        plain plan's splits a balanced grid holds (the rule: the device chooses), the row groups, whether the
        merge kernel is the wide one and the keys a warp of the key-slice kernel."""
        got = (_I64 * 12)()
        self._check(self.lib.pvt_capi_plan(*self._attention_args(q, k, v, out, kv_len, cache_seqlens), got))
        return {"kernel": "mma" if got[0] else "rows" if got[1] else "one_row", "mma_tiles": got[2],
                "mma_warps": got[3], "splits": got[4], "cluster": bool(got[5]), "balance_grid": got[6],
                "workspace_bytes": got[7], "balance_plain_splits": got[8], "row_groups": got[9],
                "merge_wide": bool(got[10]), "warp_keys": got[11]}

    def attention(self, q, k, v, out, kv_len, workspace, cache_seqlens=None):
        assert q.dtype == k.dtype == v.dtype == out.dtype and all(t.dim() == 4 for t in (q, k, v, out))
        self._check(self.lib.pvt_capi_attention(*self._attention_args(q, k, v, out, kv_len, cache_seqlens),
                                                _P(workspace.data_ptr() if workspace.numel() else None),
                                                _I64(workspace.numel()), _P(torch.cuda.current_stream().cuda_stream)))

    def speculative_accept(self, draft, target, slots, target_seqlens, draft_seqlens, out_ids, out_len, finished,
                           accepted, next_tokens, error_flag, target_capacity, draft_capacity, target_advance=1,
                           draft_advance=0, eos_token_id=-1, pad_token_id=0):
        n, k = draft.shape
        want = [(draft, torch.int64, n * k), (target, torch.int64, n * (k + 1)), (slots, torch.int32, n),
                (target_seqlens, torch.int32, None), (draft_seqlens, torch.int32, None), (out_ids, torch.int64, None),
                (out_len, torch.int32, n), (finished, torch.int32, n), (accepted, torch.int32, n),
                (next_tokens, torch.int64, n), (error_flag, torch.int32, 1)]
        for i, (t, dtype, numel) in enumerate(want):
            if not (t.is_cuda and t.dtype == dtype and t.is_contiguous() and (numel is None or t.numel() == numel)):
                raise ValueError(f"speculative_accept: argument {i} must be a contiguous CUDA {dtype} tensor"
                                 f"{'' if numel is None else f' of {numel} elements'}, got {t.dtype} {list(t.shape)}")
        ptrs = _arr(_P, [t.data_ptr() for t, _, _ in want])
        ints = _arr(_I64, [n, k, target_seqlens.numel(), target_capacity, target_advance, draft_seqlens.numel(),
                           draft_capacity, draft_advance, out_ids.shape[1], eos_token_id, pad_token_id])
        self._check(self.lib.pvt_capi_speculative_accept(ptrs, ints, _P(torch.cuda.current_stream().cuda_stream)))

    def mapped_bytes_total(self):
        return self.lib.pvt_capi_mapped_bytes_total(torch.cuda.current_device())
