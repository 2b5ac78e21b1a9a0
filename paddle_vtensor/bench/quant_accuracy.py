"""How much an 8-bit KV cache changes what a model computes (docs/QUANTIZED_CACHE.md, "Accuracy").

* attention: decode attention over float8_e4m3fn / int8 caches against the float32 cache (and the
  float16 cache, for scale), on K/V with outlier channels as real models have (a few K channels
  ~20x the others, the same channels in every token);
* end to end: the tiny random llama (bench/tiny_llama.py) applied with ``cache_dtype`` against the
  float32 cache: greedy tokens over ``--tokens`` steps (agreement: the fraction of positions equal
  before the first difference, and all positions), and the logits' max / mean absolute deviation
  with the reference tokens forced into both runs (so a divergence does not compound).

``python -m paddle_vtensor.bench.quant_accuracy [--tokens 256]`` prints one JSON object.
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import paddle

KINDS = ("float8_e4m3fn", "int8")


def outlier_kv(rng, b, s, h, d, outliers=(3, 17), factor=20.0):
    k = rng.standard_normal((b, s, h, d)).astype(np.float32)
    k[..., list(outliers)] *= factor  # the same channels in every token: real models' K outliers
    v = rng.standard_normal((b, s, h, d)).astype(np.float32)
    return k, v


def attention_error(b=4, s=1024, hq=32, hkv=8, d=128, seed=0) -> dict:
    import paddle_vtensor as pvt

    rng = np.random.default_rng(seed)
    k, v = outlier_kv(rng, b, s, hkv, d)
    q = paddle.to_tensor(rng.standard_normal((b, 1, hq, d)).astype(np.float32))
    kt, vt = paddle.to_tensor(k), paddle.to_tensor(v)
    ref = pvt.decode_attention(q, pvt.from_dense(kt), pvt.from_dense(vt)).numpy().astype(np.float64)
    results = {}
    f16 = pvt.decode_attention(q.astype("float16"), pvt.from_dense(kt.astype("float16")),
                               pvt.from_dense(vt.astype("float16"))).astype("float32").numpy()
    for name, out in [("float16", f16)] + [
            (kind, pvt.decode_attention(q, pvt.from_dense(kt, cache_dtype=kind), pvt.from_dense(vt, cache_dtype=kind))
             .numpy()) for kind in KINDS]:
        err = np.abs(out - ref)
        results[name] = {"max_abs": float(err.max()), "mean_abs": float(err.mean()),
                         "max_rel_to_max_out": float(err.max() / np.abs(ref).max())}
    return {"shape": {"batch": b, "kv_len": s, "q_heads": hq, "kv_heads": hkv, "head_dim": d,
                      "outlier_channels": 2, "outlier_factor": 20.0}, "vs_float32_cache": results}


def _run(model, ids, steps, forced=None):
    """Greedy steps from prompt ``ids``: (tokens chosen [steps], last-position logits [steps, V]).
    With ``forced``, the next input is forced[i] rather than the choice (teacher forcing)."""
    tokens, logits, past, x = [], [], None, ids
    with paddle.no_grad():
        for i in range(steps):
            out = model(input_ids=x, past_key_values=past, use_cache=True, return_dict=True)
            past = out.past_key_values
            last = out.logits[:, -1].astype("float32")
            tok = int(paddle.argmax(last, axis=-1).item())
            tokens.append(tok)
            logits.append(last.numpy()[0])
            x = paddle.to_tensor([[tok if forced is None else forced[i]]], dtype="int64")
    return tokens, np.stack(logits)


def end_to_end(tokens=256, prompt_len=32, seed=0) -> dict:
    import paddle_vtensor as pvt
    from paddle_vtensor.bench.tiny_llama import ModelShape, build_model, random_prompt

    shape = ModelShape()
    model = build_model(shape, "float32", prompt_len + tokens + 8, seed)
    ids = random_prompt(1, prompt_len, shape.vocab, seed)
    with pvt.applied(model):
        ref_tokens, ref_logits = _run(model, ids, tokens)
    results = {}
    for kind in KINDS:
        with pvt.applied(model, cache_dtype=kind):
            free, _ = _run(model, ids, tokens)
            _, forced_logits = _run(model, ids, tokens, forced=ref_tokens)
        same = np.array(free) == np.array(ref_tokens)
        first_diff = int(np.argmin(same)) if not same.all() else tokens
        dev = np.abs(forced_logits - ref_logits)
        results[kind] = {"greedy_agreement": float(same.mean()), "first_difference_at": first_diff,
                         "logits_max_abs_dev": float(dev.max()), "logits_mean_abs_dev": float(dev.mean()),
                         "logits_abs_mean": float(np.abs(ref_logits).mean()),
                         "forced_argmax_agreement": float((forced_logits.argmax(-1) == ref_logits.argmax(-1)).mean())}
    return {"model": {"hidden_size": shape.hidden_size, "layers": shape.layers, "heads": shape.heads,
                      "kv_heads": shape.kv_heads, "vocab": shape.vocab, "dtype": "float32", "prompt": prompt_len,
                      "tokens": tokens}, "vs_float32_cache": results}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--kv-len", type=int, default=1024)
    args = parser.parse_args(argv)
    paddle.set_device("cpu")
    report = {"attention": attention_error(s=args.kv_len), "tiny_llama": end_to_end(tokens=args.tokens)}
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
