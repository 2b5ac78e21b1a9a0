// Backend: the four virtual-memory primitives, one implementation per device kind.
//   host: mmap(PROT_NONE) reservation, mprotect to commit, madvise(DONTNEED)+mprotect to decommit.
//   cuda: cuMemAddressReserve / cuMemCreate+cuMemMap+cuMemSetAccess / cuMemUnmap+cuMemRelease.
// A Region (region.h) is the only caller; it keeps the chunk bookkeeping, the backend keeps none.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device.h"
#include "status.h"

namespace pvt {

// Opaque per-chunk physical handle (CUmemGenericAllocationHandle on CUDA, unused on the host).
using PhysHandle = uint64_t;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // Smallest mappable unit in bytes; every chunk size is a multiple of it.
  virtual size_t granularity() const = 0;
  // Reserve `bytes` (a multiple of granularity) of address space; no physical memory.
  virtual Status reserve(size_t bytes, void** base) = 0;
  virtual Status free_reservation(void* base, size_t bytes) = 0;
  // Back [addr, addr+bytes) with physical memory, readable and writable.
  virtual Status map(void* addr, size_t bytes, PhysHandle* handle) = 0;
  // Return [addr, addr+bytes) to the reserved-only state. `stream` (a cudaStream_t / CUstream, or
  // nullptr for the legacy default stream) is synchronised first, so work already queued on it that
  // touches the chunk finishes before the memory goes away. Ignored on the host.
  virtual Status unmap(void* addr, size_t bytes, PhysHandle handle, void* stream) = 0;
};

// The process-wide backend for `device`; created on first use, never destroyed.
// kUnsupported for CUDA in a build without PADDLE_VTENSOR_WITH_CUDA.
Status get_backend(Device device, Backend** out);

}  // namespace pvt
