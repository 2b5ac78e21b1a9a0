"""``python -m paddle_vtensor bench-prefix --beam`` (issue 31, 5(b)): beam search on the slot runner
(paddle_vtensor.beam_search: beams reordered by forking slots) against PaddleNLP's own beam search,
which ``index_select``s every layer's whole cache every step, with and without
``paddle_vtensor.apply()`` (whose VTensor caches that reorder turns dense again, migrated back the
next step). Measures bytes copied per step and ms per generated token on the demo llama; checks the
ids are equal. Writes DIR/bench_beam.json and DIR/bench_beam.png.

PaddleNLP's bytes are measured, not derived: its ``reorder_cache`` is wrapped to add up the bytes
of the tensors it returns (every layer's K and V, index_selected). With apply(), each of those
dense caches is also copied into a VTensor by the next step (``migrations`` counts them).
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from . import report
from .._ops import load_ops
from .tiny_llama import ModelShape, build_model

SHAPE = ModelShape(hidden_size=256, layers=4, heads=4, kv_heads=2, vocab=1000)  # the demo model
TINY = {"shape": ModelShape(hidden_size=64, layers=2, heads=4, kv_heads=2, vocab=128), "prompt": 24, "new": 10,
        "beams": 2, "chunk_kib": 4}


def add_arguments(p) -> None:
    """The beam part's options (all --beam-*), added to bench-prefix's parser."""
    p.add_argument("--beam", action="store_true", help="run part (b): beam search bytes copied and ms/token")
    p.add_argument("--beam-prompt", type=int, default=512, help="prompt tokens")
    p.add_argument("--beam-new", type=int, default=128, help="new tokens")
    p.add_argument("--beams", type=int, default=4, help="num_beams")
    p.add_argument("--beam-chunk-kib", type=int, default=64, help="slot-cache chunk (KiB); the demo row is 4 KiB")
    p.add_argument("--beam-copy-max-chunks", type=int, default=2,
                   help="fork policy: copy a divergent tail of at most this many chunks, remap longer ones")
    p.add_argument("--beam-no-applied", action="store_true", help="skip PaddleNLP's beam search with apply()")


class _ReorderMeter:
    """Wraps ``model.reorder_cache`` (an instance attribute, removed after): bytes of what each
    call returns, one entry per step."""

    def __init__(self, model, tick):
        self.model, self.tick, self.per_step = model, tick, []
        original = type(model).reorder_cache

        def reorder_cache(cache, beam_idx):
            out = original(model, cache, beam_idx)
            import paddle

            leaves = [t for t in _leaves(out) if isinstance(t, paddle.Tensor)]
            self.per_step.append(int(sum(int(np.prod(t.shape)) * t.element_size() for t in leaves)))
            tick(1)
            return out

        model.reorder_cache = reorder_cache

    def close(self):
        del self.model.reorder_cache


def _leaves(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _leaves(y)
    else:
        yield x


def _paddlenlp(model, ids, mask, new, beams, label, no_progress):
    from tqdm import tqdm

    bar = tqdm(total=new, desc=label, unit="tok", file=sys.stderr, disable=no_progress)
    meter = _ReorderMeter(model, bar.update)
    try:
        t0 = time.perf_counter()
        out, _ = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, decode_strategy="beam_search",
                                num_beams=beams)
        seconds = time.perf_counter() - t0
    finally:
        meter.close()
        bar.update(new - bar.n)  # the last step reorders nothing
        bar.close()
    return out.numpy(), seconds, meter.per_step


def run(args) -> int:
    import paddle

    import paddle_vtensor as pvt

    tiny = getattr(args, "tiny", False)
    shape = TINY["shape"] if tiny else SHAPE
    prompt_len, new, beams, chunk_kib = ((TINY["prompt"], TINY["new"], TINY["beams"], TINY["chunk_kib"]) if tiny else
                                         (args.beam_prompt, args.beam_new, args.beams, args.beam_chunk_kib))
    if min(prompt_len, new, chunk_kib) < 1 or beams < 2:
        raise ValueError("--beam-prompt, --beam-new and --beam-chunk-kib must be >= 1 and --beams >= 2")
    started = report.now()
    os.makedirs(args.out, exist_ok=True)
    load_ops(out=sys.stderr)
    model = build_model(shape, "float32", prompt_len + new + 1, args.seed)
    ids = paddle.to_tensor(np.random.default_rng(args.seed).integers(2, shape.vocab, size=(1, prompt_len)))
    mask = paddle.ones_like(ids)
    chunk = chunk_kib * 1024
    # Warm-up of both paths (kernels, the op library) on a short prompt.
    model.generate(input_ids=ids[:, :8], attention_mask=mask[:, :8], max_new_tokens=2, decode_strategy="beam_search",
                   num_beams=beams)
    pvt.beam_search(model, ids[:, :8], mask[:, :8], 2, beams, chunk_bytes=chunk)

    from tqdm import tqdm

    results = {}
    want, seconds, per_step = _paddlenlp(model, ids, mask, new, beams, "PaddleNLP beam search", args.no_progress)
    results["paddlenlp"] = {"seconds": seconds, "copied_bytes_per_step": per_step}
    if not getattr(args, "beam_no_applied", False):
        with pvt.applied(model):
            got, seconds, per_step = _paddlenlp(model, ids, mask, new, beams, "PaddleNLP beam search + apply()",
                                                args.no_progress)
            migrations = pvt.integration.stats(model)["migrations"]
        # Each migration copies one layer's K or V that the previous step's reorder made dense: the
        # reordered bytes once more (derived from the measured ones; `migrations` is measured).
        results["paddlenlp_applied"] = {"seconds": seconds, "copied_bytes_per_step": per_step,
                                        "migrations": migrations, "migrated_bytes_derived": int(sum(per_step)),
                                        "ids_equal_paddlenlp": bool((got == want).all())}
    bar = tqdm(total=new, desc="pvt.beam_search", unit="tok", file=sys.stderr, disable=args.no_progress)
    t0 = time.perf_counter()
    out = pvt.beam_search(model, ids, mask, new, beams, copy_max_chunks=args.beam_copy_max_chunks, chunk_bytes=chunk,
                          on_step=lambda _: bar.update(1))
    seconds = time.perf_counter() - t0
    bar.close()
    steps = out.stats["steps"]
    results["slot_beam_search"] = {
        "seconds": seconds, "copied_bytes_per_step": [s["copied_bytes"] for s in steps],
        "mapped_chunks_per_step": [s["mapped_chunks"] for s in steps], "totals": out.stats["totals"],
        "peak_mapped_bytes": max(s["mapped_bytes"] for s in steps), "peak_shared_bytes": max(s["shared_bytes"] for s in steps),
        "ids_equal_paddlenlp": bool(out.ids.shape == list(want.shape) and (out.ids.numpy() == want).all())}
    for r in results.values():
        per = r["copied_bytes_per_step"]
        r["ms_per_token"] = 1e3 * r["seconds"] / new
        r["mean_copied_bytes_per_step"] = float(np.mean(per[1:] if len(per) > 1 else per))
    result = {
        "command": "python -m paddle_vtensor " + " ".join(getattr(args, "argv", [])),
        "date": started, "machine": report.machine(),
        "note": "shared 2-core machine (other jobs running); one run of each path, in one process",
        "config": {"shape": shape.__dict__, "prompt": prompt_len, "new_tokens": new, "num_beams": beams,
                   "chunk_bytes": chunk, "copy_max_chunks": args.beam_copy_max_chunks, "seed": args.seed,
                   "device": args.device, "row_bytes": out.stats["row_bytes"]},
        "results": results,
    }
    json_path, png_path = os.path.join(args.out, "bench_beam.json"), os.path.join(args.out, "bench_beam.png")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    plot(result, png_path)
    for name, r in results.items():
        print(f"{name:>18}: {r['ms_per_token']:8.1f} ms/token, {report.human_bytes(r['mean_copied_bytes_per_step'])} "
              f"copied per step (mean after the first)")
    same = all(r.get("ids_equal_paddlenlp", True) for r in results.values())
    print(f"ids equal PaddleNLP's: {same}; wrote {json_path} and {png_path}")
    return 0 if same else 1


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (per_step, speed) = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"paddlenlp": "tab:red", "paddlenlp_applied": "tab:orange", "slot_beam_search": "tab:blue"}
    names = list(result["results"])
    for name in names:
        per = result["results"][name]["copied_bytes_per_step"]
        per_step.plot(range(len(per)), [max(b, 1) / 2**10 for b in per], label=name, color=colors[name])
    per_step.set_yscale("log")
    per_step.set_xlabel("beam step")
    per_step.set_ylabel("KiB copied by the reorder (log; 0 shown as 1 B)")
    cfg = result["config"]
    per_step.set_title(f"{cfg['num_beams']} beams, {cfg['prompt']}-token prompt")
    per_step.legend()
    speed.bar(names, [result["results"][n]["ms_per_token"] for n in names], color=[colors[n] for n in names])
    speed.set_ylabel("ms per generated token")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["add_arguments", "run"]
