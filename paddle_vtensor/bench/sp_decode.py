"""``python -m paddle_vtensor sp-decode``: greedy decoding of a small random llama with its KV cache
split across N processes (``paddle_vtensor.distributed``, CPU: gloo), against PaddleNLP's own
``generate()`` in one process. Reports whether the tokens are identical, and per rank the tokens
held and the bytes mapped after the generation (the load balance), plus ms per token.

The command starts the ranks itself with ``python -m paddle.distributed.launch --nproc_per_node N``
(each runs ``sp_rank.py``) and gathers their JSON. Exit status 0 when every rank's tokens equal the
one-process tokens, 1 otherwise."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from .._ops import load_ops
from .tiny_llama import ModelShape

SETUPS = {
    # A long generation on the demo's model: ~1-2 minutes on a shared 2-core CPU.
    "default": {"shape": ModelShape(hidden_size=256, layers=4, heads=4, kv_heads=2, vocab=1000),
                "batch": 1, "prompt_len": 256, "new_tokens": 1024},
    # Seconds, for tests.
    "tiny": {"shape": ModelShape(hidden_size=64, layers=2, heads=4, kv_heads=2, vocab=128),
             "batch": 2, "prompt_len": 13, "new_tokens": 24},
}


def add_parser(commands, common) -> None:
    sp = commands.add_parser("sp-decode", help="sequence-parallel greedy decoding across N processes (CPU)")
    sp.add_argument("--ranks", type=int, default=2, help="processes holding parts of the cache (default 2)")
    sp.add_argument("--tiny", action="store_true", help="a model and run small enough for seconds (tests)")
    sp.add_argument("--prompt-len", type=int, default=None)
    sp.add_argument("--new-tokens", type=int, default=None)
    sp.add_argument("--chunk-bytes", type=int, default=1 << 16,
                    help="mapping unit of each rank's caches (default 64 KiB: memory follows the tokens)")
    sp.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    common(sp)


def run(args) -> int:
    if args.device != "cpu":
        raise ValueError("sp-decode runs its ranks on the CPU (gloo); the 2-GPU run is tests/gpu/sp_decode.py")
    if args.ranks < 1:
        raise ValueError(f"--ranks must be at least 1, got {args.ranks}")
    setup = dict(SETUPS["tiny" if args.tiny else "default"])
    for key in ("prompt_len", "new_tokens"):
        if getattr(args, key) is not None:
            setup[key] = getattr(args, key)
    load_ops()  # build once here, not in every rank at once
    config = {"shape": setup["shape"].__dict__, "batch": setup["batch"], "prompt_len": setup["prompt_len"],
              "new_tokens": setup["new_tokens"], "seed": args.seed, "ranks": args.ranks,
              "chunk_bytes": args.chunk_bytes}
    with tempfile.TemporaryDirectory() as tmp:
        ranks = launch(config, tmp)
    result = summarise(config, ranks)
    print_report(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if result["tokens_identical"] else 1


# Paddle 3.3's libuv TCP store, which rank 0 serves, now and then kills rank 0 as it exits, after the rank's
# work is done and its results are written: SIGABRT with no message, the launch's exit status 250. A core of
# it: the store's daemon thread aborting in LibUVClient::readCallback while the main thread ran the exit
# handlers (a peer's connection closing then). 4 of 37 launches on a 2-core VM; with Paddle's other store
# (this flag off) 0 of 76 (docs/SEQUENCE_PARALLEL.md). A setting of the caller's own wins.
PADDLE_STORE_FLAG = ("FLAGS_tcp_store_using_libuv", "0")


def rank_env() -> dict:
    """The environment for processes that run this package (the ranks ``paddle.distributed.launch`` starts):
    the package importable from the folder it was imported from, and Paddle's TCP store without libuv
    (``PADDLE_STORE_FLAG``)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    env.setdefault(*PADDLE_STORE_FLAG)
    return env


def launch(config: dict, tmp: str) -> list[dict]:
    env = rank_env()
    cfg_path = os.path.join(tmp, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(config, f)
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(config["ranks"]),
           "--log_dir", os.path.join(tmp, "log"), os.path.join(os.path.dirname(__file__), "sp_rank.py"), cfg_path, tmp]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        logs = ""
        for r in range(config["ranks"]):
            path = os.path.join(tmp, "log", f"workerlog.{r}")
            if os.path.exists(path):
                with open(path) as f:
                    logs += f"--- rank {r}\n" + f.read()[-3000:]
        raise RuntimeError(f"sp-decode: the ranks failed (exit {proc.returncode}):\n{logs or proc.stderr[-3000:]}")
    out = []
    for r in range(config["ranks"]):
        with open(os.path.join(tmp, f"rank{r}.json")) as f:
            out.append(json.load(f))
    return out


def summarise(config: dict, ranks: list[dict]) -> dict:
    total_tokens = config["prompt_len"] + config["new_tokens"] - 1  # the last token is never attended
    return {"config": config,
            "tokens_identical": all(r["tokens_identical"] for r in ranks),
            "ranks_agree": all(r["tokens"] == ranks[0]["tokens"] for r in ranks),
            "cache_tokens_total": total_tokens,
            "per_rank": [{k: r[k] for k in ("rank", "cache_tokens", "mapped_bytes", "sp_ms_per_token",
                                             "one_process_ms_per_token", "collectives", "collective_bytes_sent")}
                         for r in ranks],
            "one_process_cache_bytes": ranks[0]["one_process_cache_bytes"],
            "machine_note": "CPU shared with other jobs; ranks use paddle.distributed's gloo backend"}


def print_report(result: dict) -> None:
    c = result["config"]
    s = c["shape"]
    print(f"model: random llama, hidden {s['hidden_size']}, {s['layers']} layers, {s['heads']} heads "
          f"({s['kv_heads']} kv), vocab {s['vocab']}, float32, cpu; batch {c['batch']}, prompt {c['prompt_len']}, "
          f"{c['new_tokens']} new tokens, {c['ranks']} ranks")
    print(f"tokens identical to PaddleNLP's generate() in one process: {'yes' if result['tokens_identical'] else 'NO'}")
    print(f"cache tokens (whole sequence): {result['cache_tokens_total']}; the whole cache in one process: "
          f"{result['one_process_cache_bytes']} B of K/V")
    print("rank  cache tokens  mapped bytes  ms/token (sp)  ms/token (one process, generate)")
    for r in result["per_rank"]:
        print(f"{r['rank']:>4}  {r['cache_tokens']:>12}  {r['mapped_bytes']:>12}  {r['sp_ms_per_token']:>13.2f}  "
              f"{r['one_process_ms_per_token']:>10.2f}")
