// CUDA backend: physical chunks and their mappings through the driver's virtual memory management API.
//   reserve       = cuMemAddressReserve         (address space only)
//   create_chunk  = cuMemCreate                 (physical memory, mapped nowhere)
//   map_chunk     = cuMemMap (offset 0: a chunk is one whole handle) + cuMemSetAccess(read/write for
//                   this device); one handle mapped at several addresses aliases
//   unmap_chunk   = cuMemUnmap (Region waited for the events of every using stream first)
//   release_chunk = cuMemRelease                (after the last mapping is gone)
//   events  = cuEventCreate(DISABLE_TIMING) / cuEventRecord / cuEventSynchronize / cuEventQuery
//   zeros   = with set_zero_granule(g > 0), every reserved place no chunk is mapped at reads zeros
//             (zero_cover.h): zero handles of every size from the granularity to g (cuMemCreate +
//             cuMemsetD8 once each) mapped read-only as buddy blocks; map_chunk removes the zeros
//             first, unmap_chunk puts them back. Off by default (kDefaultZeroGranule)
// Every call runs with the device's primary context current: that is the context the runtime API
// (Paddle, PyTorch, CuPy) uses, so its kernels can touch what we map.
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include "cuda_backend.h"

#include <pthread.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cuda_check.h"
#include "zero_cover.h"

namespace pvt {
namespace {

// fork(): the child inherits the parent's driver state but cannot use it (a call may fail or hang).
// Before each fork the parent notes whether the driver was initialised (cuDeviceGetCount fails with
// CUDA_ERROR_NOT_INITIALIZED otherwise); the child then refuses every CUDA call with a clear error.
std::atomic<bool> g_initialised_at_fork{false};
std::atomic<bool> g_forked_after_init{false};

void before_fork() {
  int count = 0;
  g_initialised_at_fork.store(cuDeviceGetCount(&count) == CUDA_SUCCESS);
}
void in_fork_child() {
  if (g_initialised_at_fork.load()) g_forked_after_init.store(true);
}
const int kAtForkRegistered = pthread_atfork(&before_fork, nullptr, &in_fork_child);

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

#define PVT_CHECK_NOT_FORKED() PVT_RETURN_IF_ERROR(cuda_usable_in_this_process())

// The zero cover's largest run by default. 0 (off) until the buddy-block cover has run on the H200:
// its first run found whole-handle-only mapping (docs/SLOT_CACHE.md); 64 MiB is the candidate
// (128 MiB of zero handles per device, one mapping per 64 MiB reserved).
constexpr size_t kDefaultZeroGranule = 0;

class CudaBackend final : public Backend, private ZeroMapper {
 public:
  static Status create(int ordinal, std::unique_ptr<CudaBackend>* out) {
    PVT_CHECK_NOT_FORKED();
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
    PVT_CHECK_NOT_FORKED();
    PVT_WITH_CONTEXT(ctx_);
    CUdeviceptr ptr = 0;
    PVT_CU_CHECK(cuMemAddressReserve(&ptr, bytes, granularity_, 0, 0));
    const size_t granule = cover_.granule();
    if (granule > 0) {
      Status st = ensure_zero_handles(granule);
      if (st.ok()) st = cover_.cover_reservation(*this, static_cast<uintptr_t>(ptr), bytes);
      if (!st.ok()) {
        (void)cuMemAddressFree(ptr, bytes);
        return st;
      }
    }
    *base = reinterpret_cast<void*>(ptr);
    return Status::Ok();
  }

  Status free_reservation(void* base, size_t bytes) override {
    PVT_CHECK_NOT_FORKED();
    PVT_WITH_CONTEXT(ctx_);
    PVT_RETURN_IF_ERROR(cover_.drop_reservation(*this, reinterpret_cast<uintptr_t>(base), bytes));
    PVT_CU_CHECK(cuMemAddressFree(reinterpret_cast<CUdeviceptr>(base), bytes));
    return Status::Ok();
  }

  Status set_zero_granule(size_t bytes) override {
    PVT_CHECK_NOT_FORKED();
    bytes = ZeroCover::round_granule(bytes, granularity_);
    if (bytes > 0) PVT_RETURN_IF_ERROR(ensure_zero_handles(bytes));
    cover_.set_granule(bytes);
    return Status::Ok();
  }
  size_t zero_granule() const override { return cover_.granule(); }

  Status create_chunk(size_t bytes, PhysHandle* handle) override {
    PVT_CHECK_NOT_FORKED();
    PVT_WITH_CONTEXT(ctx_);
    CUmemGenericAllocationHandle h = 0;
    PVT_CU_CHECK(cuMemCreate(&h, bytes, &prop_, 0));  // kOutOfMemory when the GPU is full
    *handle = static_cast<PhysHandle>(h);
    return Status::Ok();
  }

  Status map_chunk(void* addr, size_t bytes, PhysHandle handle) override {
    PVT_CHECK_NOT_FORKED();
    PVT_WITH_CONTEXT(ctx_);
    const CUdeviceptr ptr = reinterpret_cast<CUdeviceptr>(addr);
    PVT_RETURN_IF_ERROR(cover_.uncover(*this, static_cast<uintptr_t>(ptr), bytes));  // the zeros go first
    const Status st = map_with_access(ptr, bytes, static_cast<CUmemGenericAllocationHandle>(handle), access_);
    if (!st.ok()) (void)cover_.cover(*this, static_cast<uintptr_t>(ptr), bytes);  // as it was: zeros
    return st;
  }

  Status unmap_chunk(void* addr, size_t bytes) override {
    PVT_CHECK_NOT_FORKED();
    PVT_WITH_CONTEXT(ctx_);
    PVT_CU_CHECK(cuMemUnmap(reinterpret_cast<CUdeviceptr>(addr), bytes));
    // Zeros again. The chunk is unmapped either way: a failure here leaves the place uncovered
    // (reads there fault, as without the cover), it does not undo the unmap.
    (void)cover_.cover(*this, reinterpret_cast<uintptr_t>(addr), bytes);
    return Status::Ok();
  }

  Status release_chunk(PhysHandle handle, size_t) override {
    PVT_CHECK_NOT_FORKED();
    PVT_WITH_CONTEXT(ctx_);
    PVT_CU_CHECK(cuMemRelease(static_cast<CUmemGenericAllocationHandle>(handle)));
    return Status::Ok();
  }

  Status copy(void* dst, const void* src, size_t bytes, void* stream) override {
    PVT_CHECK_NOT_FORKED();
    PVT_WITH_CONTEXT(ctx_);
    PVT_CU_CHECK(cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes,
                               static_cast<CUstream>(stream)));
    return Status::Ok();
  }

  Status record_event(void* stream, EventHandle* event) override {
    PVT_CHECK_NOT_FORKED();
    PVT_WITH_CONTEXT(ctx_);
    if (*event == 0) {
      CUevent e = nullptr;
      PVT_CU_CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
      const CUresult r = cuEventRecord(e, static_cast<CUstream>(stream));
      if (r != CUDA_SUCCESS) {
        (void)cuEventDestroy(e);
        return cuda_detail::to_status(r, "cuEventRecord(new event, stream)", __FILE__, __LINE__);
      }
      *event = reinterpret_cast<EventHandle>(e);
      return Status::Ok();
    }
    PVT_CU_CHECK(cuEventRecord(reinterpret_cast<CUevent>(*event), static_cast<CUstream>(stream)));
    return Status::Ok();
  }

  Status wait_event(EventHandle event) override {
    PVT_CHECK_NOT_FORKED();
    PVT_WITH_CONTEXT(ctx_);
    PVT_CU_CHECK(cuEventSynchronize(reinterpret_cast<CUevent>(event)));
    return Status::Ok();
  }

  Status event_done(EventHandle event, bool* done) override {
    PVT_CHECK_NOT_FORKED();
    PVT_WITH_CONTEXT(ctx_);
    const CUresult r = cuEventQuery(reinterpret_cast<CUevent>(event));
    *done = r == CUDA_SUCCESS;
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) PVT_CU_CHECK(r);
    return Status::Ok();
  }

  void destroy_event(EventHandle event) override {
    if (!cuda_usable_in_this_process().ok() || cuCtxPushCurrent(ctx_) != CUDA_SUCCESS) return;
    ContextPopper popper;
    (void)cuEventDestroy(reinterpret_cast<CUevent>(event));
  }

 private:
  CudaBackend(int ordinal, CUcontext ctx, const CUmemAllocationProp& prop, size_t gran)
      : ordinal_(ordinal), ctx_(ctx), prop_(prop), granularity_(gran),
        cover_(kDefaultZeroGranule, gran) {
    access_.location = prop.location;
    access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    read_only_.location = prop.location;
    read_only_.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  }

  // cuMemMap of `handle` at ptr + cuMemSetAccess(`access`); nothing half-mapped on failure.
  Status map_with_access(CUdeviceptr ptr, size_t bytes, CUmemGenericAllocationHandle handle,
                         const CUmemAccessDesc& access) {
    PVT_CU_CHECK(cuMemMap(ptr, bytes, 0, handle, 0));
    const CUresult r = cuMemSetAccess(ptr, bytes, &access, 1);
    if (r != CUDA_SUCCESS) {
      (void)cuMemUnmap(ptr, bytes);
      return cuda_detail::to_status(r, "cuMemSetAccess(ptr, bytes, &access, 1)", __FILE__, __LINE__);
    }
    return Status::Ok();
  }

  // ZeroMapper: the zero handle of `bytes` read-only at addr (the caller may have pushed the context).
  Status map_zero(uintptr_t addr, size_t bytes) override {
    PVT_WITH_CONTEXT(ctx_);
    CUmemGenericAllocationHandle zero = 0;
    {
      std::lock_guard<std::mutex> lock(zero_mu_);
      auto it = zero_.find(bytes);
      if (it == zero_.end()) {
        return Status(Code::kInvalidArgument, "zero cover: no zero handle of " + std::to_string(bytes) + " bytes");
      }
      zero = it->second;
    }
    return map_with_access(static_cast<CUdeviceptr>(addr), bytes, zero, read_only_);
  }
  Status unmap_zero(uintptr_t addr, size_t bytes) override {
    PVT_WITH_CONTEXT(ctx_);
    PVT_CU_CHECK(cuMemUnmap(static_cast<CUdeviceptr>(addr), bytes));
    return Status::Ok();
  }

  // Zero handles of every size granularity x 2^j up to `granule` (made once each): the driver maps
  // only whole handles, so a buddy block of each size needs a handle of that size.
  Status ensure_zero_handles(size_t granule) {
    std::lock_guard<std::mutex> lock(zero_mu_);
    for (size_t bytes = granularity_; bytes <= granule; bytes *= 2) {
      if (zero_.count(bytes)) continue;
      CUmemGenericAllocationHandle h = 0;
      PVT_RETURN_IF_ERROR(make_zero_handle(bytes, &h));
      try {
        zero_.emplace(bytes, h);
      } catch (const std::bad_alloc&) {
        (void)cuMemRelease(h);
        return Status(Code::kOutOfMemory, "zero cover: host memory ran out");
      }
    }
    return Status::Ok();
  }

  // cuMemCreate of `bytes`, zeroed through a scratch mapping on a stream of its own (no device-wide sync).
  Status make_zero_handle(size_t bytes, CUmemGenericAllocationHandle* out) {
    PVT_WITH_CONTEXT(ctx_);
    CUmemGenericAllocationHandle h = 0;
    PVT_CU_CHECK(cuMemCreate(&h, bytes, &prop_, 0));
    CUdeviceptr scratch = 0;
    CUstream stream = nullptr;
    CUresult r = cuMemAddressReserve(&scratch, bytes, granularity_, 0, 0);
    Status st = r == CUDA_SUCCESS ? map_with_access(scratch, bytes, h, access_)
                                  : cuda_detail::to_status(r, "cuMemAddressReserve(zero scratch)", __FILE__, __LINE__);
    if (st.ok()) {
      r = cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
      if (r == CUDA_SUCCESS) r = cuMemsetD8Async(scratch, 0, bytes, stream);
      if (r == CUDA_SUCCESS) r = cuStreamSynchronize(stream);
      if (stream != nullptr) (void)cuStreamDestroy(stream);
      if (r != CUDA_SUCCESS) st = cuda_detail::to_status(r, "zeroing a zero handle", __FILE__, __LINE__);
      (void)cuMemUnmap(scratch, bytes);
    }
    if (scratch != 0) (void)cuMemAddressFree(scratch, bytes);
    if (!st.ok()) {
      (void)cuMemRelease(h);
      return st;
    }
    *out = h;
    return Status::Ok();
  }

  const int ordinal_;
  const CUcontext ctx_;
  const CUmemAllocationProp prop_;
  const size_t granularity_;
  CUmemAccessDesc access_ = {};
  CUmemAccessDesc read_only_ = {};
  ZeroCover cover_;
  std::mutex zero_mu_;
  std::map<size_t, CUmemGenericAllocationHandle> zero_;  // zero handles by size, kept for the process
};

}  // namespace

Status cuda_usable_in_this_process() {
  (void)kAtForkRegistered;
  if (!g_forked_after_init.load()) return Status::Ok();
  return Status(Code::kUnsupported,
                "CUDA cannot be used in this process: it was fork()ed from a process that had "
                "initialised CUDA, and the driver's state does not survive fork(). Start worker "
                "processes with the 'spawn' method (multiprocessing.set_start_method('spawn')) "
                "or fork before using the GPU");
}

Status make_cuda_backend(int ordinal, Backend** out) {
  // Leaked on purpose, like the stats table: regions may be destroyed during static destruction.
  static auto* mu = new std::mutex();
  static auto* backends = new std::map<int, std::unique_ptr<CudaBackend>>();
  PVT_CHECK_NOT_FORKED();  // before the mutex: the parent may have held it across fork()
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
