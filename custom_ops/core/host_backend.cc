// Host backend: the CPU counterpart of the CUDA VMM API, and the one CI exercises.
//   reserve       = mmap(PROT_READ, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE): address space only, no
//                   commit charge. Readable on purpose: a read of a place no chunk is mapped at reads
//                   the kernel's shared zero page (no memory used), so printing a slot cache or
//                   .numpy() of one reads zeros where nothing was written instead of faulting
//                   (issue 30). Writes there still fault: the ops refuse them before writing.
//   create_chunk  = a page range of this process's memfd: a released range of the same size, else
//                   the end of the file (which grows sparsely); no memory until first touch
//   map_chunk     = mmap(MAP_SHARED|MAP_FIXED) of that range: every mapping shares its pages
//   unmap_chunk   = mmap(PROT_READ anonymous, MAP_FIXED) over the mapping: the range stays reserved
//                   (and reads zeros again)
//   release_chunk = fallocate(PUNCH_HOLE): the pages are freed now; the range is handed out again
// One memfd per process, however many chunks live: the fd count is 1 (plus 1 inherited from each
// fork ancestor, see below). File offsets cost nothing where no page lives, so the file is never
// compacted; the released-range lists hold at most the peak number of live chunks.
// A handle is a position in one offset space over all of the process's memfds (files_).
// Each mapping whose file range does not continue its neighbour's is a VMA of its own, so the
// kernel's vm.max_map_count (65530 by default) bounds such mappings: 128 GiB of 2 MiB chunks mapped
// in an interleaved order; past it mmap fails with ENOMEM (kOutOfMemory). A growing tail gets
// consecutive file ranges, and its mappings merge into one VMA.
//
// fork(): a child shares the chunks its parent had mapped (MAP_SHARED; anonymous memory was
// copy-on-write) and must never free them under the parent. So the child makes its own memfd at its
// first create_chunk, above every inherited handle, and releasing an inherited chunk frees nothing.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backend.h"

namespace pvt {
namespace {

Status os_error(const char* call, size_t bytes) {
  int err = errno;
  Code code = (err == ENOMEM || err == ENOSPC) ? Code::kOutOfMemory : Code::kDriver;
  return Status(code, std::string(call) + " of " + std::to_string(bytes) +
                          " bytes failed: " + std::strerror(err));
}

// Growth step of the memfd's size: sparse, so only the number of ftruncate calls depends on it.
constexpr uint64_t kFileGrowth = uint64_t(1) << 30;

class HostBackend final : public Backend {
 public:
  Device device() const override { return Device::host(); }
  size_t granularity() const override { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

  Status reserve(size_t bytes, void** base) override {
    void* p = mmap(nullptr, bytes, kReservedProt, kReservedFlags, -1, 0);
    if (p == MAP_FAILED) return os_error("mmap(PROT_READ, MAP_NORESERVE)", bytes);
    *base = p;
    return Status::Ok();
  }

  Status free_reservation(void* base, size_t bytes) override {
    if (munmap(base, bytes) != 0) return os_error("munmap", bytes);
    return Status::Ok();
  }

  Status create_chunk(size_t bytes, PhysHandle* handle) override {
    return catch_bad_alloc("create_chunk", [&]() -> Status {
      std::lock_guard<std::mutex> lock(mu_);
      if (owner_ != getpid()) PVT_RETURN_IF_ERROR(open_own_file());
      auto it = released_.find(bytes);
      if (it != released_.end() && !it->second.empty()) {
        // The lowest free range: successive chunks tend to sit in file order, so the kernel can
        // merge their mappings into one VMA.
        *handle = *it->second.begin();
        it->second.erase(it->second.begin());
        return Status::Ok();
      }
      const File& file = files_.back();
      const uint64_t need = end_ - file.base + bytes;
      if (need > file_size_) {
        const uint64_t size = (need + kFileGrowth - 1) / kFileGrowth * kFileGrowth;
        if (ftruncate(file.fd, static_cast<off_t>(size)) != 0) return os_error("ftruncate(memfd)", size);
        file_size_ = size;
      }
      *handle = end_;
      end_ += bytes;
      return Status::Ok();
    });
  }

  Status map_chunk(void* addr, size_t bytes, PhysHandle handle) override {
    int fd = -1;
    off_t offset = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const File* file = file_of(handle);
      if (file == nullptr) {
        return Status(Code::kInvalidArgument, "map_chunk: " + std::to_string(handle) +
                                                  " is not a chunk of the host backend");
      }
      fd = file->fd;
      offset = static_cast<off_t>(handle - file->base);
    }
    void* p = mmap(addr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, offset);
    if (p == MAP_FAILED) {
      const Status failed = os_error("mmap(memfd, MAP_SHARED|MAP_FIXED)", bytes);
      // A failed MAP_FIXED may have dropped the reservation there: put it back.
      (void)mmap(addr, bytes, kReservedProt, kReservedFlags | MAP_FIXED, -1, 0);
      return failed;
    }
    return Status::Ok();
  }

  Status unmap_chunk(void* addr, size_t bytes) override {
    if (mmap(addr, bytes, kReservedProt, kReservedFlags | MAP_FIXED, -1, 0) == MAP_FAILED) {
      return os_error("mmap(PROT_READ anonymous, MAP_FIXED) over a chunk", bytes);
    }
    return Status::Ok();
  }

  Status release_chunk(PhysHandle handle, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (owner_ != getpid() || handle < files_.back().base) return Status::Ok();  // the parent's
    const File& file = files_.back();
    if (fallocate(file.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>(handle - file.base), static_cast<off_t>(bytes)) != 0) {
      return os_error("fallocate(PUNCH_HOLE)", bytes);
    }
    try {
      released_[bytes].insert(handle);
    } catch (const std::bad_alloc&) {
      // The pages are freed; only this stretch of (free) file offsets is never handed out again.
    }
    return Status::Ok();
  }

  Status copy(void* dst, const void* src, size_t bytes, void*) override {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }

  // Host kernels run synchronously: by the time an op returns, its work is done.
  Status record_event(void*, EventHandle* event) override {
    *event = 0;
    return Status::Ok();
  }
  Status wait_event(EventHandle) override { return Status::Ok(); }
  Status event_done(EventHandle, bool* done) override {
    *done = true;
    return Status::Ok();
  }
  void destroy_event(EventHandle) override {}

 private:
  // Reserved, unmapped memory: read-only private anonymous pages, i.e. the zero page on a read.
  static constexpr int kReservedProt = PROT_READ;
  static constexpr int kReservedFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

  struct File {
    uint64_t base;  // handle of the file's offset 0
    int fd;
  };

  // A memfd of this process's own, above every handle handed out so far. Caller holds mu_.
  Status open_own_file() {
    const int fd = memfd_create("paddle_vtensor_chunks", MFD_CLOEXEC);
    if (fd < 0) return os_error("memfd_create", 0);
    try {
      files_.push_back(File{end_, fd});
    } catch (const std::bad_alloc&) {
      close(fd);
      throw;
    }
    owner_ = getpid();
    file_size_ = 0;
    released_.clear();  // ranges of an inherited file: the parent hands them out, not us
    return Status::Ok();
  }

  // The file `handle` lies in, or nullptr. Caller holds mu_.
  const File* file_of(PhysHandle handle) const {
    if (files_.empty() || handle < files_.front().base || handle >= end_) return nullptr;
    auto it = std::upper_bound(files_.begin(), files_.end(), handle,
                               [](uint64_t h, const File& f) { return h < f.base; });
    return &*std::prev(it);
  }

  std::mutex mu_;  // regions of different caches may create and release from different threads
  std::vector<File> files_;   // ascending base; the last is this process's own when owner_ matches
  pid_t owner_ = 0;           // the process that opened files_.back()
  uint64_t end_ = 0;          // first handle never handed out
  uint64_t file_size_ = 0;    // size of files_.back()
  std::map<size_t, std::set<uint64_t>> released_;  // chunk size -> released handles of our file
};

}  // namespace

Backend* host_backend() {
  // Leaked on purpose: regions may be destroyed during static destruction at exit.
  static auto* host = new HostBackend();
  return host;
}

}  // namespace pvt
