"""Every environment variable the project reads, in one place: this module reads the Python ones,
and the table below lists all of them (C++ and build ones too), each with who reads it and what
it means. One prefix: ``PADDLE_VTENSOR_``. tests/test_env.py checks that every
``PADDLE_VTENSOR_*`` name in the repository's code is listed here and that nothing reads a
``PVT_*`` variable.

===================================  ==========================  ==========================================
knob                                 read by                     meaning
===================================  ==========================  ==========================================
PADDLE_VTENSOR_MAX_SEQ_LEN           Python (Config) and the     tokens reserved per new cache (default
                                     PIR pass (passes/)          4096); the pass's default for its caches
PADDLE_VTENSOR_CHUNK_BYTES           Python (Config) and the     mapping granularity of new caches
                                     PIR pass                    (default 2 MiB, rounded up to the device's)
PADDLE_VTENSOR_AUTOPATCH             the .pth hook               ``1``: at interpreter start, patch PaddleNLP's
                                     (paddle_vtensor_autopatch   ``generate()`` and ``paddle.inference.
                                     .py, which may not import   create_predictor`` when imported (issue 26);
                                     this package: it would      read once, at start: from Python call
                                     import paddle)              ``paddle_vtensor.autopatch()`` instead
PADDLE_VTENSOR_REPORT                the same hook               ``1``: at exit, one line per model/predictor
                                                                 the hook saw, to stderr
PADDLE_VTENSOR_JIT                   Python (_ops)               ``1``: ignore an installed ops library and
                                                                 build the sources just in time
PADDLE_VTENSOR_BUILD_DIR             Python (_ops, bench-host)   where just-in-time builds go (default
                                                                 ``~/.cache/paddle_vtensor``)
PADDLE_VTENSOR_VERBOSE_BUILD         Python (_ops, _packaged)    non-empty: print the compiler's commands
PADDLE_VTENSOR_NUM_THREADS           C++ (kernels/               threads of the CPU attention kernel
                                     cpu_thread_pool.cc)         (default: the CPUs this process may use)
PADDLE_VTENSOR_CPU_ISA               C++ (kernels/               ``scalar``, ``avx2`` or ``avx512``: a lower
                                     decode_attention_cpu.cc)    instruction set than the best the CPU has
PADDLE_VTENSOR_NVIDIA_WHEELS         scripts/compile_cuda.sh     folder of NVIDIA wheels whose CUDA headers
                                                                 the nvcc compile check uses
PADDLE_VTENSOR_BENCH_PAGES           tests/native benchmark      how the CPU attention benchmark allocates
                                     (bench_attention_cpu)       the cache: ``region``, ``huge``, other
PADDLE_VTENSOR_BENCH_FLUSH           tests/native benchmark      set: flush the caches between calls
                                                                 (``huge``: with a huge-page buffer)
PADDLE_VTENSOR_TORCH_BUILD           tests/gpu/build.py          build folder of the GPU-only torch harness
PADDLE_VTENSOR_SP_TORCH_BUILD        tests/gpu/sp_build.py       build folder of its sequence-parallel part
PADDLE_VTENSOR_HYPOTHESIS_EXAMPLES   tests/test_slots_stateful   examples of the slot state machine (default:
                                     (hypothesis_examples())     a fixed, derandomized set for CI); set:
                                                                 that many, random (--hypothesis-seed=N)
===================================  ==========================  ==========================================

Not an environment variable: ``PADDLE_VTENSOR_WITH_CUDA`` is the compile-time define (set by
_build.py when paddle is the GPU build) that compiles the CUDA half of the adapter.
"""
from __future__ import annotations

import os

DEFAULT_MAX_SEQ_LEN = 4096
DEFAULT_CHUNK_BYTES = 2 << 20


def _int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None


def max_seq_len() -> int:
    return _int("PADDLE_VTENSOR_MAX_SEQ_LEN", DEFAULT_MAX_SEQ_LEN)


def chunk_bytes() -> int:
    return _int("PADDLE_VTENSOR_CHUNK_BYTES", DEFAULT_CHUNK_BYTES)


def jit_forced() -> bool:
    return os.environ.get("PADDLE_VTENSOR_JIT") == "1"


def build_dir() -> str:
    return os.environ.get("PADDLE_VTENSOR_BUILD_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                       "paddle_vtensor")


def hypothesis_examples() -> int | None:
    """The property tests' example count when set (a longer, randomized run), else None."""
    text = os.environ.get("PADDLE_VTENSOR_HYPOTHESIS_EXAMPLES")
    return None if not text else _int("PADDLE_VTENSOR_HYPOTHESIS_EXAMPLES", 0)


def verbose_build() -> bool:
    return bool(os.environ.get("PADDLE_VTENSOR_VERBOSE_BUILD"))
