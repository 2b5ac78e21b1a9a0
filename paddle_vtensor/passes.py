"""The static-graph half: a PIR pass that appends KV caches in place.

``vtensor_kv_cache_pass`` (C++, ``passes/``, compiled into the extension and registered when it
loads) rewrites every ``concat([past, new], axis=1)`` that appends to a rank-4 cache the program
returns or carries through a loop into ``custom_op.vtensor_append``, and moves those caches to the
VTensor's storage layout ``[S, B, H, D]`` across the program's boundary: a static transpose is a
copy, so a logical ``[B, S, H, D]`` cache could not cross it for free. After the pass, a cache input
(same name) takes ``[S, B, H, D]`` and a cache output gives ``[S, B, H, D]``; feed
:func:`paddle_vtensor.storage_view` of a cache, and read an output back with
``paddle.transpose(out, [1, 0, 2, 3])``. PaddleNLP's attention over the cache becomes
``custom_op.vtensor_decode_attention``, which reads the storage in place. docs/STATIC.md has the
whole story, including what still copies and why.

    import paddle_vtensor.passes as pvt_passes
    n = pvt_passes.apply(program)          # a paddle.pir Program with fetch/shadow_output ops
    config.enable_custom_passes([pvt_passes.PASS_NAME])   # paddle.inference, after importing
"""
from __future__ import annotations

import json
import logging

from . import _ops
from ._op_names import PASS_OPTION_QUIET, PVT_ATTR_CHUNK_BYTES, PVT_ATTR_MAX_SEQ_LEN, PVT_PASS_KV_CACHE

PASS_NAME = PVT_PASS_KV_CACHE

_log = logging.getLogger("paddle_vtensor.passes")


def load() -> None:
    """Load the extension, which registers the pass with Paddle (needed before
    ``Config.enable_custom_passes([PASS_NAME])`` or ``PassManager.add_pass(PASS_NAME)``)."""
    _ops.load()


def last_report() -> dict:
    """What the pass's last run in this process did: ``appends`` (concats rewritten),
    ``attentions`` (attention chains now reading the cache in place), ``assigns_removed``,
    ``storage_inputs`` / ``storage_outputs`` (what now carries ``[S, B, H, D]``), ``copies`` (what
    still materialises a cache-sized tensor, and why), ``refused`` (why the program was left
    unchanged) and ``notes`` (why there was nothing to do)."""
    return json.loads(_ops.c.last_pass_report())


def apply(program, max_seq_len: int | None = None, chunk_bytes: int | None = None) -> int:
    """Run ``vtensor_kv_cache_pass`` on ``program`` (a ``paddle.pir`` Program, changed in place)
    and return how many cache appends it rewrote (0: the program is unchanged).

    The program must mark what it returns (``pd_op.fetch`` or ``builtin.shadow_output``, as a
    program saved by ``paddle.jit.save`` and loaded by ``paddle.static.load_inference_model``
    does) or carry the cache through a ``while`` loop: that is how the pass tells a cache append
    from any other concat. A program it cannot rewrite whole is left unchanged; the reasons are
    logged at WARNING on ``paddle_vtensor.passes`` and returned by :func:`last_report`.

    max_seq_len, chunk_bytes: for caches the ops migrate into new VTensors (the first step, fed a
    plain tensor); default: ``PADDLE_VTENSOR_MAX_SEQ_LEN`` / ``PADDLE_VTENSOR_CHUNK_BYTES``, else
    the ops' defaults.
    """
    import paddle

    load()
    attrs = {PASS_OPTION_QUIET: True}
    for key, value in ((PVT_ATTR_MAX_SEQ_LEN, max_seq_len), (PVT_ATTR_CHUNK_BYTES, chunk_bytes)):
        if value is not None:
            if int(value) <= 0:
                raise ValueError(f"{key} must be positive, got {value}")
            attrs[key] = int(value)
    manager = paddle.pir.PassManager()
    manager.add_pass(PASS_NAME, attrs)
    manager.run(program)
    report = last_report()
    for why in report["refused"]:
        _log.warning("%s left the program unchanged: %s", PASS_NAME, why)
    for note in report["notes"]:
        _log.info("%s: nothing to rewrite: %s", PASS_NAME, note)
    for copy in report["copies"]:
        _log.info("%s: remaining copy: %s", PASS_NAME, copy)
    return int(report["appends"])


__all__ = ["PASS_NAME", "apply", "last_report", "load"]
