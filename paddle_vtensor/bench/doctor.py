"""``python -m paddle_vtensor doctor``: what this installation would do, for a bug report or before
switching PADDLE_VTENSOR_AUTOPATCH on: versions, the ops (do they load, from where), the .pth
hook (installed? on?), CUDA and virtual-memory support, and what the hook would patch."""
from __future__ import annotations

import os
import site
import sys

HOOK = "paddle_vtensor_autopatch.pth"


def add_parser(commands, common) -> None:
    doctor = commands.add_parser("doctor", help="versions, ops, the autopatch hook, CUDA/VMM, what would be patched")
    common(doctor)


def _site_dirs() -> list[str]:
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    return dirs + ([user] if user else [])


def _line(name: str, value) -> None:
    print(f"{name:<22} {value}")


def run(args) -> int:
    import paddle

    import paddle_vtensor

    _line("python", sys.version.split()[0])
    _line("paddle", f"{paddle.__version__} ({'CUDA' if paddle.is_compiled_with_cuda() else 'CPU'} build)")
    try:
        import paddlenlp

        _line("paddlenlp", paddlenlp.__version__)
    except ImportError as e:
        paddlenlp = None
        _line("paddlenlp", f"not importable ({e})")
    _line("paddle_vtensor", f"{paddle_vtensor.__version__} from {os.path.dirname(paddle_vtensor.__file__)}")
    try:
        from paddle_vtensor import _ops

        _line("ops", f"load, from {_ops.library_path()}")
    except Exception as e:
        _line("ops", f"DO NOT LOAD: {type(e).__name__}: {' '.join(str(e).split())}")
    found = [d for d in _site_dirs() if os.path.isfile(os.path.join(d, HOOK))]
    _line("autopatch hook", f"installed: {os.path.join(found[0], HOOK)}" if found else
          f"not installed (no {HOOK} in {', '.join(_site_dirs())}); paddle_vtensor.autopatch() still works")
    import paddle_vtensor_autopatch as hook

    _line("PADDLE_VTENSOR_AUTOPATCH", f"{hook.requested()} "
                                      f"({'on' if hook.installed() else 'off'} in this process)")
    gpus = paddle.device.cuda.device_count() if paddle.is_compiled_with_cuda() else 0
    _line("CUDA", f"{gpus} GPU(s)" if gpus else "no GPU (a CPU build or none visible)")
    _line("virtual memory", "GPU caches: CUDA VMM (cuMemAddressReserve/cuMemMap)" if gpus else
          "host backend only (mmap reserve, chunks committed as tokens arrive)")
    _line("would patch (eager)", "paddlenlp.generation.utils.GenerationMixin.generate: apply() at each model's "
                                 "first generate(); families: llama (MHA/GQA/MQA), qwen"
          + ("" if paddlenlp is None or paddlenlp.__version__.split(".post")[0] in ("2.8.1", "3.0.0b4")
             else f" (paddlenlp {paddlenlp.__version__} is untested: models it refuses run PaddleNLP's path)"))
    _line("would patch (static)", "paddle.inference.create_predictor: vtensor_kv_cache_pass added when the "
                                  "program's inputs/outputs stay as they are; else left alone with a warning")
    return 0
