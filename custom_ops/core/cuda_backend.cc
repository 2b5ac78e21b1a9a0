// CUDA backend: reserve / map / unmap through the driver's virtual memory management API.
//   reserve = cuMemAddressReserve            (address space only)
//   map     = cuMemCreate + cuMemMap + cuMemSetAccess(read/write for this device)
//   unmap   = cuStreamSynchronize + cuMemUnmap + cuMemRelease
// Every call runs with the device's primary context current: that is the context the runtime API
// (Paddle, PyTorch, CuPy) uses, so its kernels can touch what we map.
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include "cuda_backend.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cuda_check.h"

namespace pvt {
namespace {

// Pops the context pushed just before it, on every return path.
class ContextPopper {
 public:
  ContextPopper() = default;
  ContextPopper(const ContextPopper&) = delete;
  ContextPopper& operator=(const ContextPopper&) = delete;
  ~ContextPopper() {
    CUcontext popped = nullptr;
    (void)cuCtxPopCurrent(&popped);
  }
};

// Push `ctx` (checked like any other call) and pop it when the enclosing scope ends.
#define PVT_WITH_CONTEXT(ctx)              \
  PVT_CU_CHECK(cuCtxPushCurrent(ctx));     \
  ContextPopper _pvt_context_popper

class CudaBackend final : public Backend {
 public:
  static Status create(int ordinal, std::unique_ptr<CudaBackend>* out) {
    PVT_CU_CHECK(cuInit(0));
    int count = 0;
    PVT_CU_CHECK(cuDeviceGetCount(&count));
    if (ordinal < 0 || ordinal >= count) {
      return Status(Code::kInvalidArgument, "CUDA device " + std::to_string(ordinal) +
                                                " does not exist (" + std::to_string(count) +
                                                " visible)");
    }
    CUdevice dev = 0;
    PVT_CU_CHECK(cuDeviceGet(&dev, ordinal));
    int vmm = 0;
    PVT_CU_CHECK(cuDeviceGetAttribute(
        &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
    if (!vmm) {
      return Status(Code::kUnsupported, "CUDA device " + std::to_string(ordinal) +
                                            " does not support virtual memory management");
    }

    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0;
    PVT_CU_CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));

    // Retained once and never released: the backend lives as long as the process, and releasing
    // the primary context during static destruction could race the runtime's own teardown.
    CUcontext ctx = nullptr;
    PVT_CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    out->reset(new CudaBackend(ordinal, ctx, prop, gran));
    return Status::Ok();
  }

  Device device() const override { return Device::cuda(ordinal_); }
  size_t granularity() const override { return granularity_; }

  Status reserve(size_t bytes, void** base) override {
    PVT_WITH_CONTEXT(ctx_);
    CUdeviceptr ptr = 0;
    PVT_CU_CHECK(cuMemAddressReserve(&ptr, bytes, granularity_, 0, 0));
    *base = reinterpret_cast<void*>(ptr);
    return Status::Ok();
  }

  Status free_reservation(void* base, size_t bytes) override {
    PVT_WITH_CONTEXT(ctx_);
    PVT_CU_CHECK(cuMemAddressFree(reinterpret_cast<CUdeviceptr>(base), bytes));
    return Status::Ok();
  }

  Status map(void* addr, size_t bytes, PhysHandle* handle) override {
    PVT_WITH_CONTEXT(ctx_);
    CUmemGenericAllocationHandle h = 0;
    PVT_CU_CHECK(cuMemCreate(&h, bytes, &prop_, 0));  // kOutOfMemory when the GPU is full
    const Status s = map_handle(reinterpret_cast<CUdeviceptr>(addr), bytes, h);
    if (!s.ok()) {
      // Nothing half-mapped: the physical memory goes back; map_handle undid its own mapping.
      (void)cuMemRelease(h);
      return s;
    }
    *handle = static_cast<PhysHandle>(h);
    return Status::Ok();
  }

  Status unmap(void* addr, size_t bytes, PhysHandle handle, void* stream) override {
    PVT_WITH_CONTEXT(ctx_);
    // Kernels queued on `stream` may still read or write the chunk; let them finish first.
    PVT_CU_CHECK(cuStreamSynchronize(static_cast<CUstream>(stream)));
    PVT_CU_CHECK(cuMemUnmap(reinterpret_cast<CUdeviceptr>(addr), bytes));
    PVT_CU_CHECK(cuMemRelease(static_cast<CUmemGenericAllocationHandle>(handle)));
    return Status::Ok();
  }

 private:
  CudaBackend(int ordinal, CUcontext ctx, const CUmemAllocationProp& prop, size_t gran)
      : ordinal_(ordinal), ctx_(ctx), prop_(prop), granularity_(gran) {
    access_.location = prop.location;
    access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }

  // Map `h` at `ptr` and make it readable and writable; on failure leaves `ptr` unmapped.
  Status map_handle(CUdeviceptr ptr, size_t bytes, CUmemGenericAllocationHandle h) {
    PVT_CU_CHECK(cuMemMap(ptr, bytes, 0, h, 0));
    const Status s = set_access(ptr, bytes);
    if (!s.ok()) (void)cuMemUnmap(ptr, bytes);
    return s;
  }

  Status set_access(CUdeviceptr ptr, size_t bytes) {
    PVT_CU_CHECK(cuMemSetAccess(ptr, bytes, &access_, 1));
    return Status::Ok();
  }

  const int ordinal_;
  const CUcontext ctx_;
  const CUmemAllocationProp prop_;
  const size_t granularity_;
  CUmemAccessDesc access_ = {};
};

}  // namespace

Status make_cuda_backend(int ordinal, Backend** out) {
  // Leaked on purpose, like the stats table: regions may be destroyed during static destruction.
  static auto* mu = new std::mutex();
  static auto* backends = new std::map<int, std::unique_ptr<CudaBackend>>();
  std::lock_guard<std::mutex> lock(*mu);
  auto it = backends->find(ordinal);
  if (it == backends->end()) {
    std::unique_ptr<CudaBackend> backend;
    PVT_RETURN_IF_ERROR(CudaBackend::create(ordinal, &backend));  // failures are not cached
    it = backends->emplace(ordinal, std::move(backend)).first;
  }
  *out = it->second.get();
  return Status::Ok();
}

}  // namespace pvt

#endif  // PADDLE_VTENSOR_WITH_CUDA
