// Device memory for the CUDA native tests: GpuMem, Mem (phys_chunks_checks.h) for device memory (the tests
// of aliasing and sharing, test_phys_chunks.cu and test_slot_share.cu, read and write it with synchronous
// copies), and DevBuf, a cudaMalloc'ed buffer that frees itself (ptr null when the allocation failed).
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

struct DevBuf {
  void* ptr = nullptr;
  explicit DevBuf(size_t n) { if (cudaMalloc(&ptr, n ? n : 1) != cudaSuccess) ptr = nullptr; }
  ~DevBuf() { if (ptr) cudaFree(ptr); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};
