"""One rank of ``python -m paddle_vtensor sp-decode`` (started by paddle.distributed.launch):
decodes with its part of the cache, then (every rank, one process each) PaddleNLP's own generate()
for the reference tokens. Writes ``<tmp>/rank<r>.json``."""
import json
import os
import sys
import time
import warnings

import numpy as np
import paddle
import paddle.distributed as dist


def main(cfg_path: str, out_dir: str) -> None:
    warnings.filterwarnings("ignore", message=r"(?s).*paddle\.incubate\.nn\.functional\.swiglu")
    with open(cfg_path) as f:
        cfg = json.load(f)
    paddle.set_device("cpu")
    import paddle_vtensor as pvt

    pvt._ops.load()  # before the first collective: gloo gives a late peer only so long
    dist.init_parallel_env()
    from paddle_vtensor.generation.distributed import SequenceParallelKVCache
    from paddle_vtensor.bench import paired_run, sp_llama
    from paddle_vtensor.bench.tiny_llama import ModelShape, build_model, random_prompt

    shape = ModelShape(**cfg["shape"])
    total = cfg["prompt_len"] + cfg["new_tokens"]
    model = build_model(shape, "float32", total, cfg["seed"])  # the same weights on every rank (seeded)
    prompt = random_prompt(cfg["batch"], cfg["prompt_len"], shape.vocab, cfg["seed"])
    sp = SequenceParallelKVCache(shape.layers, world_size=cfg["ranks"], max_seq_len=total,
                                 chunk_bytes=cfg["chunk_bytes"])
    marks = []
    tokens = sp_llama.greedy(model, sp, prompt, cfg["new_tokens"], total,
                             on_step=lambda i: marks.append(time.perf_counter()))
    stats = sp.stats()

    started = time.perf_counter()
    ref = paired_run.generate(model, prompt, cfg["new_tokens"])  # PaddleNLP's own path, this process alone
    one_ms = (time.perf_counter() - started) * 1e3 / cfg["new_tokens"]
    token_bytes = cfg["batch"] * shape.kv_heads * shape.head_dim * 4
    result = {"rank": stats["rank"], "tokens": tokens.numpy().tolist(),
              "tokens_identical": bool(np.array_equal(tokens.numpy(), ref)),
              "cache_tokens": stats["tokens"], "tokens_per_rank": stats["tokens_per_rank"],
              "mapped_bytes": stats["mapped_bytes"],
              "collectives": stats["collectives"], "collective_bytes_sent": stats["collective_bytes_sent"],
              "own_cache_bytes": 2 * shape.layers * stats["tokens"] * token_bytes,
              "one_process_cache_bytes": 2 * shape.layers * stats["length"] * token_bytes,
              # Decode steps only (from the first token on), not the prefill.
              "sp_ms_per_token": (marks[-1] - marks[0]) * 1e3 / max(1, len(marks) - 1),
              "one_process_ms_per_token": one_ms}
    del sp
    with open(os.path.join(out_dir, f"rank{result['rank']}.json"), "w") as f:
        json.dump(result, f)
    pvt.memory_stats("cpu")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
