"""The command line: ``python -m paddle_vtensor {demo,bench}``."""
from __future__ import annotations

import argparse
import sys
import warnings

DTYPES = ("float32", "float16", "bfloat16")


def default_device() -> str:
    import paddle

    if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        return "gpu:0"
    return "cpu"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m paddle_vtensor",
                                  description="KV caches that grow in place: demo and benchmark on PaddleNLP llama.")
    commands = top.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="same tokens with and without the plugin, and what each cost")
    demo.add_argument("--tiny", action="store_true", help="a model and run small enough for seconds (tests)")
    demo.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    _common(demo)

    bench = commands.add_parser("bench", help="decode latency vs context length, time and memory; JSON + PNG",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    bench.add_argument("--hidden-size", type=int, default=256, help="model width")
    bench.add_argument("--layers", type=int, default=4, help="decoder layers")
    bench.add_argument("--heads", type=int, default=4, help="attention heads")
    bench.add_argument("--kv-heads", type=int, default=2,
                       help="key/value heads (fewer than --heads: grouped-query attention)")
    bench.add_argument("--vocab", type=int, default=1000, help="vocabulary size")
    bench.add_argument("--batch", type=int, default=1, help="sequences per generate() call")
    bench.add_argument("--input-len", type=int, default=3072, help="prompt tokens")
    bench.add_argument("--output-len", type=int, default=1024, help="generated tokens")
    bench.add_argument("--dtype", choices=DTYPES, default="float32", help="weights and cache (CPU: float32 only)")
    bench.add_argument("--out", metavar="DIR", default="bench_out", help="where bench.json and bench.png go")
    bench.add_argument("--repeats", type=int, default=1,
                       help="runs per path, alternating; per-step medians are reported")
    bench.add_argument("--chunk-kib", type=int, default=None,
                       help="VTensor mapping chunk in KiB; None: the library default (2048)")
    bench.add_argument("--baseline-only", action="store_true", help="skip the plugin run")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    _common(bench)
    return top


def _common(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--device", default=None, help="cpu or gpu:N (default: gpu:0 if there is one, else cpu)")
    sub.add_argument("--seed", type=int, default=0, help="weights and prompt seed")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    args.argv = argv  # recorded with the results
    _quiet_third_party()
    import paddle

    args.device = _normalise_device(args.device or default_device())
    if args.device == "cpu" and getattr(args, "dtype", "float32") != "float32":
        # Checked here because paddle only says so deep inside the first matmul.
        raise ValueError(f"--dtype {args.dtype} needs --device gpu: paddle's CPU kernels have no "
                         f"{args.dtype} matmul; use --dtype float32 on the CPU")
    paddle.set_device(args.device)
    if args.command == "demo":
        from . import demo

        return demo.run(args)
    from . import bench

    return bench.run(args)


def _normalise_device(device: str) -> str:
    return "gpu:0" if device == "gpu" else device


def _quiet_third_party() -> None:
    # PaddleNLP's llama warns on every call about something users of this
    # command cannot act on (a deprecated swiglu alias); it would bury the table.
    warnings.filterwarnings("ignore", message=r"(?s).*paddle\.incubate\.nn\.functional\.swiglu")
