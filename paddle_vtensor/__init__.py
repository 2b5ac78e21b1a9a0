"""paddle_vtensor: KV caches that grow in place in virtual memory, for PaddlePaddle.

    import paddle_vtensor as pvt
    k = pvt.append(k, new_k)          # [B, S, H, D] + [B, T, H, D] -> [B, S + T, H, D], in place
    k = pvt.truncate(k, n)            # roll back without copying
    pvt.memory_stats("cpu")

The package, by room:

* the API, here: api.py (seq-major VTensor caches), quant.py (8-bit caches), attention.py, merge.py,
  slots.py (slot caches),
  errors.py (every exception and the one error table), passes.py / static_export.py (static
  graphs), integration/ (PaddleNLP models unchanged);
* generation/: generation strategies over slot caches (inflight, speculative, speculative_accept,
  speculation_policy, model_runner, distributed);
* bench/: the command line ``python -m paddle_vtensor <command>``, its benchmarks and demo models;
  nothing in the library imports it;
* private: _ops/ (the one way into the compiled library), _op_names.py (op_names.h's names),
  _env.py (every environment knob), _build.py / _packaged.py / _installed_check.py (building it).
"""
from .api import (
    Config,
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
from .errors import (
    ReservationFullError,
    SlotError,
    SpeculativeError,
    UnsupportedModelError,
    VTensorError,
    VTensorOutOfMemoryError,
)
from .map_ahead import Ticket, reserve_slots_async, watch_ahead
from .merge import merge_attention_states
from .pool import collect, fill_pool, pool_limit, set_pool_limit, trim_pool
from .quant import cache_scale, calibrate_fp8_scale
from .sharing import reserve_for_write, share_prefix, sharing_info
from .slots import (
    LayerKV,
    SlotKVCache,
    attention_with_kvcache,
    check_slot_errors,
    read_slot,
    release_slot,
    reserve_slot,
    slot_cache,
    slot_info,
    slot_kv_cache,
)
from .zero_reads import set_zero_reads, zero_reads

# The PaddleNLP integration, the static-graph pass, the exporter and the generation strategies load
# on first use, so `import paddle_vtensor` costs only the tensor API (and builds or loads no ops yet).
_LAZY_MODULES = {"integration": "integration", "passes": "passes", "static_export": "static_export",
                 "generation": "generation", "distributed": "generation.distributed"}
_LAZY_NAMES = {"generate_inflight": "generation.inflight", "beam_search": "generation.beam_search",
               "parallel_sample": "generation.sampling", "SlotModelRunner": "generation.model_runner",
               "speculative_generate": "generation.speculative", "applied": "integration",
               "AdaptiveSpeculation": "generation.speculation_policy", "StepCosts": "generation.speculation_policy",
               "apply": "integration", "remove": "integration", "autopatch": "_autopatch"}


def __getattr__(name):
    import importlib

    if name in _LAZY_MODULES:
        return importlib.import_module(f".{_LAZY_MODULES[name]}", __name__)
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'paddle_vtensor' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "autopatch",
    "beam_search",
    "parallel_sample",
    "cache_scale",
    "calibrate_fp8_scale",
    "collect",
    "fill_pool",
    "reserve_slots_async",
    "watch_ahead",
    "set_zero_reads",
    "zero_reads",
    "Ticket",
    "pool_limit",
    "set_pool_limit",
    "trim_pool",
    "reserve_for_write",
    "share_prefix",
    "sharing_info",
    "speculative_generate",
    "AdaptiveSpeculation",
    "StepCosts",
    "SpeculativeError",
    "LayerKV",
    "SlotError",
    "SlotKVCache",
    "SlotModelRunner",
    "attention_with_kvcache",
    "check_slot_errors",
    "generate_inflight",
    "read_slot",
    "release_slot",
    "reserve_slot",
    "slot_cache",
    "slot_info",
    "slot_kv_cache",
    "Config",
    "UnsupportedModelError",
    "applied",
    "apply",
    "decode_attention",
    "distributed",
    "merge_attention_states",
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
