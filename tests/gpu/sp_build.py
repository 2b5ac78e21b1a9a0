"""Builds tests/gpu/sp_merge_torch.cu with the merge kernel into a PyTorch extension (GPU machine:
nvcc + PyTorch with CUDA). The sources are the project's own kernels, compiled as is."""
import glob
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def load(verbose=False):
    from torch.utils.cpp_extension import load as _load
    ops = os.path.join(ROOT, "custom_ops")
    # The same closure as build.py (core + every kernel, host and CUDA) so every symbol the merge's
    # check and helpers need is there, wherever it lives.
    sources = ([os.path.join(ROOT, "tests", "gpu", "sp_merge_torch.cu")]
               + sorted(glob.glob(os.path.join(ops, "core", "*.cc"))) + sorted(glob.glob(os.path.join(ops, "kernels", "*.cc")))
               + sorted(glob.glob(os.path.join(ops, "kernels", "*.cu"))))
    flags = ["-O3", "-DPADDLE_VTENSOR_WITH_CUDA", "-std=c++17"]
    build_dir = os.environ.get("PADDLE_VTENSOR_SP_TORCH_BUILD", os.path.join(ROOT, "build", "pvt_sp_torch"))
    os.makedirs(build_dir, exist_ok=True)
    return _load(name="pvt_sp_torch", sources=sources, extra_include_paths=[ops], extra_cflags=flags,
                 extra_cuda_cflags=flags + ["-gencode=arch=compute_90,code=sm_90"], extra_ldflags=["-lcuda"],
                 build_directory=build_dir, verbose=verbose)


if __name__ == "__main__":
    print(load(verbose=True))
