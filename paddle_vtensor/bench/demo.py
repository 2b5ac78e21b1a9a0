"""``python -m paddle_vtensor demo``: the same greedy generate() on a small random llama with and
without the plugin; prints whether the tokens match and what each path cost. Exit status: 0 when
the tokens are identical and the plugin's caches were VTensors, 1 when not, 2 when the plugin
could not be applied at all."""
from __future__ import annotations

import json

from . import report
from .._ops import load_ops
from .paired_run import first_difference, load_integration, measure_both, warm_up
from .tiny_llama import ModelShape, build_model, random_prompt

# About a minute on a 2-core CPU for both paths together (after the one-time op build).
DEMO = {"shape": ModelShape(hidden_size=256, layers=4, heads=4, kv_heads=2, vocab=1000),
        "batch": 2, "input_len": 1024, "new_tokens": 128}
# Seconds, for tests.
TINY = {"shape": ModelShape(hidden_size=64, layers=2, heads=4, kv_heads=2, vocab=128),
        "batch": 2, "input_len": 16, "new_tokens": 8}
DTYPE = "float32"


def add_parser(commands, common) -> None:
    demo = commands.add_parser("demo", help="same tokens with and without the plugin, and what each cost")
    demo.add_argument("--tiny", action="store_true", help="a model and run small enough for seconds (tests)")
    demo.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    common(demo)


def run(args) -> int:
    setup = TINY if args.tiny else DEMO
    shape, batch, input_len, new_tokens = setup["shape"], setup["batch"], setup["input_len"], setup["new_tokens"]
    load_ops()
    integration, missing = load_integration()
    print(f"model: random llama, hidden {shape.hidden_size}, {shape.layers} layers, {shape.heads} heads "
          f"({shape.kv_heads} kv), vocab {shape.vocab}, {DTYPE}, on {args.device}, seed {args.seed}")
    print(f"greedy generate(): batch {batch}, {input_len} prompt tokens, {new_tokens} new tokens")
    model = build_model(shape, DTYPE, input_len + new_tokens, args.seed)
    prompt = random_prompt(batch, input_len, shape.vocab, args.seed)
    warm_up(model, prompt, integration)
    baseline, plugin = measure_both(model, prompt, new_tokens, args.device, integration)

    print()
    print(report.comparison_table(baseline, plugin))
    print()
    print(report.legend(baseline.decode_memory.paddle_counts_vtensor))
    print()
    token = report.token_bytes(shape, batch, DTYPE)
    first, last = input_len + 1, input_len + new_tokens - 1
    whole = lambda tokens: report.human_bytes(2 * shape.layers * token * tokens)  # noqa: E731
    print(f"The cache bytes from the shape (one token of K or V in one layer = batch x kv_heads x head_dim "
          f"x 4 B = {token} B):")
    print(f"  baseline: concat rewrites the whole cache, 2 (K,V) x {shape.layers} layers x {token} B x tokens "
          f"after the step = {whole(first)} at the first decode step ({first} tokens), {whole(last)} at the "
          f"last ({last})")
    print(f"  plugin: the first decode step copies the prefill's cache into VTensors once ({whole(first)}); "
          f"then each step writes one token, 2 x {shape.layers} x {token} B = {whole(1)}")
    if plugin is not None and plugin.plugin_counters:
        print(f"  plugin's own counters: {plugin.plugin_counters}")
    print()

    result = {"config": {"shape": shape.__dict__, "batch": batch, "input_len": input_len,
                         "new_tokens": new_tokens, "dtype": DTYPE, "device": args.device, "seed": args.seed},
              "baseline": report.run_summary(baseline),
              "plugin": report.run_summary(plugin) if plugin else None,
              "plugin_missing": missing, "tokens_identical": None}
    status = _verdict(baseline, plugin, missing, result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return status


def _verdict(baseline, plugin, missing, result) -> int:
    if plugin is None:
        print(f"plugin not run: {missing}")
        return 2
    difference = first_difference(baseline.tokens, plugin.tokens)
    result["tokens_identical"] = difference is None
    if difference is None:
        print(f"tokens identical: yes ({baseline.tokens.shape[0]} x {baseline.tokens.shape[1]} tokens)")
    else:
        seq, pos = difference
        print(f"tokens identical: NO (sequence {seq} first differs at new token {pos})")
    in_vtensors = plugin.cache_in_vtensors()
    if in_vtensors is False:
        print("the plugin run's KV caches were not VTensors: the plugin was not in effect")
    return 0 if difference is None and in_vtensors is not False else 1
