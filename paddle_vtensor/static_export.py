"""Export a PaddleNLP causal LM's decode step as a static program, and run it with the pass.

    from paddle_vtensor import static_export as se
    se.export_decode_step(model, "out/step", batch_size=1, past_len=127)
    predictor = se.create_predictor("out/step")            # vtensor_kv_cache_pass enabled
    logits, caches = se.run_decode_step(predictor, ids, pos, mask, caches)

``past_len=None`` exports one program for every past length. That needs PaddleNLP 3.0.0b4: 2.8.1's
llama compares attention shapes in Python (modeling.py, ``attn_weights.shape != [...]``, not
guarded by ``paddle.in_dynamic_mode()`` as in 3.0.0b4), which ``paddle.jit.to_static`` cannot trace
with a dynamic sequence length, so with 2.8.1 one exported program serves one past length
(docs/STATIC.md).

PaddleNLP's own export of the whole generation loop (``model.to_static``) has no such limit: one
program serves every prompt length and number of new tokens, and the caches stay inside it:

    se.export_generation(model, "out/gen")                   # model.to_static(path, use_top_p=False)
    predictor = se.create_predictor("out/gen")               # the pass rewrites the loop's appends
    tokens = se.run_generation(predictor, ids, mask, max_new_tokens=64)
"""
from __future__ import annotations

import paddle

from . import _ops
from .api import from_dense, is_vtensor, storage_view
from .passes import PASS_NAME, last_report

_PERM = [1, 0, 2, 3]


class _DecodeStep(paddle.nn.Layer):
    """model(...) with the cache flattened to [k0, v0, k1, v1, ...] in and out."""

    def __init__(self, model, num_layers: int):
        super().__init__()
        self.model = model
        self.num_layers = num_layers

    def forward(self, input_ids, position_ids, attention_mask, past):
        pairs = [(past[2 * i], past[2 * i + 1]) for i in range(self.num_layers)]
        out = self.model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                         past_key_values=pairs, use_cache=True, return_dict=False)
        flat = []
        for k, v in out[1]:
            flat += [k, v]
        return out[0], flat


def cache_geometry(config) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of a PaddleNLP config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return config.num_hidden_layers, kv_heads, config.hidden_size // heads


def input_names(num_layers: int) -> list[str]:
    names = ["input_ids", "position_ids", "attention_mask"]
    for i in range(num_layers):
        names += [f"past_key_{i}", f"past_value_{i}"]
    return names


def export_decode_step(model, path: str, batch_size: int, past_len: int | None,
                       dtype: str = "float32") -> list[str]:
    """Trace ``model``'s decode step (one new token over a cache of ``past_len`` tokens; None: any
    past length, PaddleNLP 3.0.0b4) with ``paddle.jit.to_static`` and save it with
    ``paddle.jit.save`` under ``path`` (``path.json`` + ``path.pdiparams``). Returns the program's
    input names.

    Inputs: input_ids / position_ids ``[batch, 1]`` int64, attention_mask ``[batch, past_len + 1]``
    int64 (1 = attend), then each layer's past key and value ``[batch, past_len, kv_heads,
    head_dim]``. Outputs: logits ``[batch, 1, vocab]``, then each layer's key and value
    ``[batch, past_len + 1, kv_heads, head_dim]``. The saved program is PaddleNLP's own: the pass
    runs when the program is loaded (:func:`create_predictor`).
    """
    if batch_size < 1 or (past_len is not None and past_len < 1):
        raise ValueError(f"batch_size and past_len must be >= 1, got {batch_size} and {past_len}")
    layers, kv_heads, head_dim = cache_geometry(model.config)
    spec = [
        paddle.static.InputSpec([batch_size, 1], "int64", "input_ids"),
        paddle.static.InputSpec([batch_size, 1], "int64", "position_ids"),
        paddle.static.InputSpec([batch_size, None if past_len is None else past_len + 1], "int64", "attention_mask"),
        [paddle.static.InputSpec([batch_size, past_len, kv_heads, head_dim], dtype, name)
         for name in input_names(layers)[3:]],
    ]
    model.eval()
    try:
        step = paddle.jit.to_static(_DecodeStep(model, layers), input_spec=spec, full_graph=True)
        paddle.jit.save(step, path, input_spec=spec)
    except TypeError as e:
        if past_len is not None or "bool" not in str(e):
            raise
        raise RuntimeError(
            f"export_decode_step: {type(model).__name__} does not trace with a dynamic past length: its Python "
            f"code branches on a tensor's value (PaddleNLP 2.8.1's llama: `if attn_weights.shape != [...]` in "
            f"scaled_dot_product_attention, unguarded; 3.0.0b4 guards it with paddle.in_dynamic_mode()). "
            f"Export a fixed past_len, or use PaddleNLP 3.0.0b4.") from e
    return input_names(layers)


def export_generation(model, path: str) -> None:
    """Save ``model``'s whole generation loop with PaddleNLP's ``model.to_static(path,
    {"use_top_p": False})`` (prefill, then a ``while`` loop of decode steps; top-k sampling, greedy
    with top_k=1). Every shape is dynamic: one program serves every prompt length and number of new
    tokens, and the KV caches are loop variables that never leave the program, so its interface
    is the same with and without the pass. Run it with :func:`create_predictor` and
    :func:`run_generation`."""
    if not hasattr(model, "to_static"):
        raise TypeError(f"export_generation: {type(model).__name__} has no PaddleNLP to_static() (a generation model)")
    model.eval()
    model.to_static(path, {"use_top_p": False})


def run_generation(predictor, input_ids, attention_mask, max_new_tokens: int, top_k: int = 1,
                   position_ids=None) -> paddle.Tensor:
    """Generate with a program saved by :func:`export_generation`; returns the new tokens
    ``[B, max_new_tokens]`` (greedy for ``top_k=1``). position_ids default ``0..T-1`` per row."""
    if position_ids is None:
        batch, width = input_ids.shape
        position_ids = paddle.arange(width, dtype="int64").expand([batch, width])
    feeds = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
             "max_new_tokens": paddle.to_tensor([int(max_new_tokens)], dtype="int64"),
             "top_k": paddle.to_tensor([int(top_k)], dtype="int64")}
    names = predictor.get_input_names()
    missing = [n for n in names if n not in feeds]
    if missing:
        raise ValueError(f"run_generation: the program takes {names}; not a PaddleNLP generation export "
                         f"(unknown inputs {missing})")
    return predictor.run([feeds[n] for n in names])[0]


def create_predictor(path: str, use_pass: bool = True, use_gpu: bool = False, gpu_id: int = 0,
                     mkldnn: bool = False, quiet: bool = True):
    """A ``paddle.inference`` predictor for a program saved by :func:`export_decode_step` (or any
    ``paddle.jit.save`` program), with ``vtensor_kv_cache_pass`` enabled unless ``use_pass`` is
    False. With the pass, cache inputs take and cache outputs give the storage layout
    ``[S, B, H, D]``: use :func:`run_decode_step`, which converts. Raises RuntimeError, with the
    pass's reasons, when the pass leaves the program unchanged.

    mkldnn: oneDNN's CPU fusions (Paddle's CPU default) change llama's numerics on their own, with
    or without the pass; off by default so outputs match eager PaddleNLP.
    """
    from paddle import inference

    _ops.load()  # registers the custom ops and the pass
    config = inference.Config(path + ".json", path + ".pdiparams")
    if use_gpu:
        config.enable_use_gpu(256, gpu_id)
    else:
        config.disable_gpu()
        if not mkldnn:
            config.disable_mkldnn()
    if quiet:
        config.disable_glog_info()
    if use_pass:
        config.enable_custom_passes([PASS_NAME])
    predictor = inference.create_predictor(config)
    if use_pass:
        report = last_report()  # the pass ran inside create_predictor
        if report["appends"] == 0:
            why = "; ".join(report["refused"] + report["notes"])
            raise RuntimeError(f"{PASS_NAME} did not rewrite {path}, so its caches keep the logical layout "
                               f"that run_decode_step does not feed: {why}. Create the predictor with "
                               f"use_pass=False to run it unchanged.")
    return predictor


def to_storage(cache: paddle.Tensor) -> paddle.Tensor:
    """A logical ``[B, S, H, D]`` cache as the contiguous ``[S, B, H, D]`` a passed program takes:
    free for a VTensor, one copy (into a new VTensor) for anything else."""
    if not is_vtensor(cache) or not storage_view(cache).is_contiguous():
        cache = from_dense(cache.contiguous())
    return storage_view(cache)


def run_decode_step(predictor, input_ids, position_ids, attention_mask, caches, storage_layout: bool = True):
    """One decode step on a predictor from :func:`create_predictor`.

    caches: ``[(k, v), ...]`` logical ``[B, S, H, D]`` per layer. Returns ``(logits, caches)`` with
    the new caches logical ``[B, S + 1, H, D]`` (views of the VTensors the program appended to in
    place). ``storage_layout=False`` is for a predictor created with ``use_pass=False``.
    """
    flat = [t for pair in caches for t in pair]
    if storage_layout:
        flat = [to_storage(t) for t in flat]
    outs = predictor.run([input_ids, position_ids, attention_mask] + flat)
    new = outs[1:]
    if storage_layout:
        new = [paddle.transpose(t, _PERM) for t in new]  # eager: a free view
    return outs[0], [(new[2 * i], new[2 * i + 1]) for i in range(len(new) // 2)]


__all__ = ["cache_geometry", "create_predictor", "export_decode_step", "export_generation", "input_names",
           "run_decode_step", "run_generation", "to_storage"]
