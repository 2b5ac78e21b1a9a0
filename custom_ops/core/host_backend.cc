// Host backend: the CPU counterpart of the CUDA VMM API, and the one CI exercises.
//   reserve  = mmap(PROT_NONE, MAP_NORESERVE): address space only, no commit charge
//   map      = mprotect(READ|WRITE): pages are committed on first touch
//   unmap    = madvise(MADV_DONTNEED) (frees the pages now) + mprotect(PROT_NONE) (faults on use)
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "backend.h"

namespace pvt {
namespace {

Status os_error(const char* call, size_t bytes) {
  int err = errno;
  Code code = (err == ENOMEM) ? Code::kOutOfMemory : Code::kDriver;
  return Status(code, std::string(call) + " of " + std::to_string(bytes) +
                          " bytes failed: " + std::strerror(err));
}

class HostBackend final : public Backend {
 public:
  Device device() const override { return Device::host(); }
  size_t granularity() const override { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

  Status reserve(size_t bytes, void** base) override {
    void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return os_error("mmap(PROT_NONE)", bytes);
    *base = p;
    return Status::Ok();
  }

  Status free_reservation(void* base, size_t bytes) override {
    if (munmap(base, bytes) != 0) return os_error("munmap", bytes);
    return Status::Ok();
  }

  Status map(void* addr, size_t bytes, PhysHandle* handle) override {
    if (mprotect(addr, bytes, PROT_READ | PROT_WRITE) != 0) return os_error("mprotect(RW)", bytes);
    *handle = 0;
    return Status::Ok();
  }

  Status unmap(void* addr, size_t bytes, PhysHandle) override {
    if (madvise(addr, bytes, MADV_DONTNEED) != 0) return os_error("madvise(DONTNEED)", bytes);
    if (mprotect(addr, bytes, PROT_NONE) != 0) return os_error("mprotect(NONE)", bytes);
    return Status::Ok();
  }

  // Host kernels run synchronously: by the time an op returns, its work is done.
  Status record_event(void*, EventHandle* event) override {
    *event = 0;
    return Status::Ok();
  }
  Status wait_event(EventHandle) override { return Status::Ok(); }
  void destroy_event(EventHandle) override {}
};

}  // namespace

Backend* host_backend() {
  static HostBackend host;
  return &host;
}

}  // namespace pvt
