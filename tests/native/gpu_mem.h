// Mem (phys_chunks_checks.h) for device memory: the CUDA native tests of aliasing and sharing
// (test_phys_chunks.cu, test_slot_share.cu) read and write it with synchronous copies.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

struct GpuMem {
  static bool write(void* dst, const std::vector<uint8_t>& bytes) {
    return cudaMemcpy(dst, bytes.data(), bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess &&
           cudaDeviceSynchronize() == cudaSuccess;
  }
  static bool read(const void* src, size_t n, std::vector<uint8_t>* out) {
    out->resize(n);
    return cudaMemcpy(out->data(), src, n, cudaMemcpyDeviceToHost) == cudaSuccess;
  }
};
