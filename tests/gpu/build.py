"""Builds tests/gpu/pvt_torch.cu with the core and kernels (CUDA on) into a PyTorch extension.

Run on the GPU machine (needs nvcc and PyTorch with CUDA): `python3 tests/gpu/build.py` or import
`load()`. The sources are the project's own custom_ops/core and custom_ops/kernels, compiled as is.
"""
import glob
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def load(verbose=False):
    from torch.utils.cpp_extension import load as _load
    ops = os.path.join(ROOT, "custom_ops")
    sources = ([os.path.join(ROOT, "tests", "gpu", "pvt_torch.cu")] + sorted(glob.glob(os.path.join(ops, "core", "*.cc")))
               + sorted(glob.glob(os.path.join(ops, "kernels", "*.cc"))) + sorted(glob.glob(os.path.join(ops, "kernels", "*.cu"))))
    flags = ["-O3", "-DPADDLE_VTENSOR_WITH_CUDA", "-std=c++17"]
    return _load(name="pvt_torch", sources=sources, extra_include_paths=[ops],
                 extra_cflags=flags, extra_cuda_cflags=flags + ["-gencode=arch=compute_90,code=sm_90"],
                 extra_ldflags=["-lcuda"], build_directory=_build_dir(), verbose=verbose)


def _build_dir():
    d = os.environ.get("PADDLE_VTENSOR_TORCH_BUILD", os.path.join(ROOT, "build", "pvt_torch"))
    os.makedirs(d, exist_ok=True)
    return d


if __name__ == "__main__":
    print(load(verbose=True))
