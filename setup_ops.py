"""Build and install the paddle_vtensor ops against the installed paddle:

    python setup_ops.py install

CUDA sources are compiled (and -DPADDLE_VTENSOR_WITH_CUDA set) when paddle is the GPU build.
The source list and flags come from paddle_vtensor/_build.py, which the just-in-time build uses too.
Without this step, ``import paddle_vtensor`` builds the same extension once into ~/.cache.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from paddle.utils.cpp_extension import CppExtension, CUDAExtension, setup  # noqa: E402

from paddle_vtensor import _build  # noqa: E402  (imports only the stdlib and, lazily, paddle)

cuda = _build.with_cuda()
Extension = CUDAExtension if cuda else CppExtension
extra = {"cxx": _build.cxx_flags(cuda)}
if cuda:
    extra["nvcc"] = _build.nvcc_flags()

setup(
    name=_build.EXTENSION_NAME,
    ext_modules=Extension(
        sources=[os.path.relpath(p) for p in _build.sources(cuda)],
        extra_compile_args=extra,
        extra_link_args=_build.ld_flags(cuda),
    ),
)
