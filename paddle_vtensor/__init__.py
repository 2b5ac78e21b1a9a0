"""paddle_vtensor: KV caches that grow in place in virtual memory, for PaddlePaddle.

    import paddle_vtensor as pvt
    k = pvt.append(k, new_k)          # [B, S, H, D] + [B, T, H, D] -> [B, S + T, H, D], in place
    k = pvt.truncate(k, n)            # roll back without copying
    pvt.memory_stats("cpu")
"""
from .api import (
    Config,
    ReservationFullError,
    VTensorError,
    VTensorOutOfMemoryError,
    append,
    configure,
    from_dense,
    is_vtensor,
    memory_stats,
    reserve_one_token,
    reset_peak_mapped,
    set_mapped_limit,
    storage_view,
    truncate,
)

from .attention import decode_attention
from . import integration, passes, static_export
from .integration import UnsupportedModelError, applied, apply, remove

__version__ = "0.1.0"

__all__ = [
    "Config",
    "UnsupportedModelError",
    "applied",
    "apply",
    "decode_attention",
    "integration",
    "passes",
    "static_export",
    "remove",
    "ReservationFullError",
    "VTensorError",
    "VTensorOutOfMemoryError",
    "append",
    "configure",
    "from_dense",
    "is_vtensor",
    "memory_stats",
    "reserve_one_token",
    "reset_peak_mapped",
    "set_mapped_limit",
    "storage_view",
    "truncate",
]
