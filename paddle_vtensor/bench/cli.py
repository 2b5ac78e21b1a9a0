"""The command line: ``python -m paddle_vtensor <command>``, one of COMMANDS below: demo, bench,
bench-attention, bench-host, bench-inflight, bench-prefix, bench-speculative, sp-decode, doctor."""
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


# Every subcommand is a module of this package with `add_parser(commands, common)` and `run(args)`.
# A new one is one line here.
COMMANDS = ("demo", "bench", "bench-attention", "bench-host", "bench-inflight", "bench-prefix", "bench-speculative",
            "sp-decode", "doctor")


def parser() -> argparse.ArgumentParser:
    import importlib

    top = argparse.ArgumentParser(prog="python -m paddle_vtensor",
                                  description="KV caches that grow in place: demos and benchmarks. Commands: "
                                              + ", ".join(COMMANDS) + ".")
    commands = top.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f".{name.replace('-', '_')}", __package__).add_parser(commands, _common)
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
    import importlib

    return importlib.import_module(f".{args.command.replace('-', '_')}", __package__).run(args)


def _normalise_device(device: str) -> str:
    return "gpu:0" if device == "gpu" else device


def _quiet_third_party() -> None:
    # PaddleNLP's llama warns on every call about something users of this
    # command cannot act on (a deprecated swiglu alias); it would bury the table.
    warnings.filterwarnings("ignore", message=r"(?s).*paddle\.incubate\.nn\.functional\.swiglu")
