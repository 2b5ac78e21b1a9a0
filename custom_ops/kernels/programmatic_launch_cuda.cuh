// Programmatic dependent launch (Hopper and later; compiled out before sm_90, where launches serialise as
// usual), shared by the kernels that run back to back in a decode step: an append writes this step's K/V
// and lengths, then the attention reads them.
//
// The attention kernels are launched with programmatic stream serialization (decode_attention_cuda.cu):
// their blocks may be placed on the SMs before the kernel ahead of them on the stream has finished, so
// the launch latency overlaps that kernel's end. Each of them waits in wait_for_previous_grid before it
// touches global memory at all: q, the cache, the lengths, the workspace and the output may all still be
// written or read by that kernel. A kernel ahead calls allow_next_grid where its own blocks no longer need
// SMs, which lets the next one be placed from then on (without it, from its last block's exit).
// Internal to the CUDA build of the kernels; include only from .cu files compiled by nvcc.
#pragma once

namespace pvt {
namespace cuda_launch {

// Waits until the kernel ahead on the stream has finished and its writes are visible; returns at once
// when nothing is ahead, or when this kernel was not launched programmatically.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel on the stream, when it is launched programmatically, be placed now; it still waits
// for this whole grid in wait_for_previous_grid.
__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

}  // namespace cuda_launch
}  // namespace pvt
