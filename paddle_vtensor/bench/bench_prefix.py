"""``python -m paddle_vtensor bench-prefix``: issue 31's sharing benchmark. Part (b), ``--beam``, is
beam_bench.py (beam search: bytes copied per step and ms/token against PaddleNLP's beam search).
Part (a), the shared system prompt of generate_inflight, comes with the prefix cache (share-inflight
branch); until then this command runs part (b) only."""
from __future__ import annotations

from . import beam_bench


def add_parser(commands, common) -> None:
    import argparse

    p = commands.add_parser("bench-prefix", help="zero-copy sharing: beam search bytes copied (--beam); JSON + PNG",
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    beam_bench.add_arguments(p)
    p.add_argument("--tiny", action="store_true", help="a model and run small enough for seconds (tests)")
    p.add_argument("--out", metavar="DIR", default="bench_prefix_out")
    p.add_argument("--no-progress", action="store_true")
    common(p)


def run(args) -> int:
    if not args.beam:
        raise SystemExit("bench-prefix: only part (b) is in this build; pass --beam")
    return beam_bench.run(args)
