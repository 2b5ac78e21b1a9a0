"""Records what paddle_vtensor.beam_search does to its slots, for the H200 beam-step benchmark
(tests/native/bench_beam_step.cu; issue 31 point 6), which cannot run Paddle.

Runs on the host (Paddle CPU): the demo llama of ``bench-prefix --beam`` (random weights, hidden 256,
4 layers), one 512-token prompt, 4 beams, 128 new tokens, 64 KiB chunks (16 tokens a chunk, as a
Llama-3-8B token row of 128 KiB has in a 2 MiB chunk). Writes one line per slot operation, in order:

    feed <slot>:<rows> ...             rows appended to each slot by one forward
    fork <src> <dst> <tokens> <common> dst takes src's first `tokens` rows; it already holds `common`
                                       of them (SlotForker.fork's arguments)

The replay applies its own fork policy (copy the divergent tail or remap) to these; the ids and which
beam forks from which do not depend on the policy. Usage (repository root, the project's venv):
    python tests/gpu/beam_trace.py tests/gpu/data/beam_trace_p512_n128_b4.txt
"""
from __future__ import annotations

import sys

import numpy as np
import paddle

import paddle_vtensor as pvt
from paddle_vtensor.bench.beam_bench import SHAPE
from paddle_vtensor.bench.tiny_llama import build_model
from paddle_vtensor.generation import beam_search as bs
from paddle_vtensor.generation import slot_fork

PROMPT, NEW, BEAMS, CHUNK, SEED = 512, 128, 4, 64 << 10, 0


def main(path: str) -> None:
    lines = [f"# beam_search trace: prompt {PROMPT}, {NEW} new tokens, {BEAMS} beams, demo llama seed {SEED}"]
    feed, fork = bs.feed, slot_fork.SlotForker.fork

    def recording_feed(runner, slots, tokens, positions=None):
        lines.append("feed " + " ".join(f"{s}:{len(t)}" for s, t in zip(slots, tokens)))
        return feed(runner, slots, tokens, positions)

    def recording_fork(self, src, dst, tokens, common):
        lines.append(f"fork {src} {dst} {tokens} {common}")
        return fork(self, src, dst, tokens, common)

    model = build_model(SHAPE, "float32", PROMPT + NEW + 1, SEED)
    ids = paddle.to_tensor(np.random.default_rng(SEED).integers(2, SHAPE.vocab, size=(1, PROMPT)))
    bs.feed, slot_fork.SlotForker.fork = recording_feed, recording_fork
    try:
        out = pvt.beam_search(model, ids, paddle.ones_like(ids), NEW, BEAMS, chunk_bytes=CHUNK)
    finally:
        bs.feed, slot_fork.SlotForker.fork = feed, fork
    t = out.stats["totals"]
    lines.insert(1, f"# forks: {t['copies']} copies, {t['remaps']} remaps (copy_max_chunks 2); "
                    f"{sum(ln.startswith('feed') for ln in lines)} forwards")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(lines[1], "->", path)


if __name__ == "__main__":
    main(sys.argv[1])
