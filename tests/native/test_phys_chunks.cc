// Native test of physical chunks and aliasing on the host backend (issue 31 point 1): the shared
// checks of phys_chunks_checks.h, plus what only the host shows: a released chunk's pages are gone,
// an unmapped chunk is reserved (read-only, reading zeros) again, one memfd serves any number of chunks, a fork()
// child never frees its parent's memory, and a host allocation failure mid-alias changes nothing.
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "alloc_failure_injection.h"
#include "phys_chunks_checks.h"

using namespace pvt;
using pvt_test::Report;


namespace {

const Device kHost = Device::host();
constexpr size_t kChunk = 64 << 10;

using phys_test::HostMem;

// The permissions ("rw-s", "---p", ...) of the mapping holding `addr`, from /proc/self/maps.
std::string perms_at(const void* addr) {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return "";
  const auto a = reinterpret_cast<uintptr_t>(addr);
  unsigned long lo = 0, hi = 0;
  char perms[8] = {0};
  std::string found;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo <= a && a < hi) {
      found = perms;
      break;
    }
  }
  std::fclose(f);
  return found;
}

int open_fds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

void test_host_memfd(Report& r) {
  Backend* be = host_backend();
  const size_t cb = kChunk;
  void* base = nullptr;
  if (!r.ok(be->reserve(2 * cb, &base), "memfd.reserve")) return;
  char* p = static_cast<char*>(base);
  PhysHandle h = 0, again = 0;
  std::string why;
  // Reserved memory is read-only and reads the zero page (a print of a slot cache must not fault).
  r.check(perms_at(p) == "r--p", "memfd.reserved_is_read_only", perms_at(p));
  r.check(phys_test::holds<HostMem>(p, std::vector<uint8_t>(cb, 0), &why), "memfd.reserved_reads_zeros", why);
  if (r.ok(be->create_chunk(cb, &h), "memfd.create") && r.ok(be->map_chunk(p, cb, h), "memfd.map")) {
    r.check(perms_at(p) == "rw-s", "memfd.mapped_is_shared_rw", perms_at(p));
    std::memset(p, 0x7e, cb);
    r.ok(be->unmap_chunk(p, cb), "memfd.unmap");
    r.check(perms_at(p) == "r--p", "memfd.unmapped_is_reserved_again", perms_at(p));
    r.check(phys_test::holds<HostMem>(p, std::vector<uint8_t>(cb, 0), &why), "memfd.unmapped_reads_zeros", why);
    r.ok(be->release_chunk(h, cb), "memfd.release");
    // The released range is handed out again: its old bytes must be gone (punched), not reused.
    if (r.ok(be->create_chunk(cb, &again), "memfd.create_after_release") && r.ok(be->map_chunk(p, cb, again), "memfd.map_reused")) {
      r.eq(again, h, "memfd.released_range_reused");
      r.check(phys_test::holds<HostMem>(p, std::vector<uint8_t>(cb, 0), &why), "memfd.release_frees_pages", why);
      r.ok(be->unmap_chunk(p, cb), "memfd.unmap_reused");
      r.ok(be->release_chunk(again, cb), "memfd.release_reused");
    }
  }
  r.ok(be->free_reservation(base, 2 * cb), "memfd.free_reservation");

  // One memfd for every chunk: 1,000 live chunks in 10 regions open no file descriptor.
  const int fds = open_fds();
  {
    std::unique_ptr<Region> regs[10];
    bool ok = true;
    for (auto& g : regs) ok = ok && Region::create(kHost, 100 * cb, cb, &g).ok() && g->map_range(0, 100 * cb).ok();
    r.check(ok, "memfd.thousand_chunks_mapped");
    r.eq(open_fds(), fds, "memfd.fd_count_bounded");
  }
}

// A fork() child shares the parent's chunks; destroying its copy of a region must not free them.
void test_fork(Report& r) {
  const size_t cb = kChunk;
  std::unique_ptr<Region> a;
  if (!r.ok(Region::create(kHost, 2 * cb, cb, &a), "fork.create") || !r.ok(a->map_range(0, 2 * cb), "fork.map")) return;
  const auto p = phys_test::pattern(2 * cb, 50);
  std::memcpy(a->base(), p.data(), p.size());
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    a.reset();  // releases what the child sees of the parent's chunks
    std::unique_ptr<Region> own;
    const bool ok = Region::create(kHost, 2 * cb, cb, &own).ok() && own->map_range(0, 2 * cb).ok();
    if (ok) std::memset(own->base(), 0x33, 2 * cb);
    own.reset();
    _exit(ok ? 0 : 3);
  }
  int status = -1;
  r.check(child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "fork.child_ran", "status " + std::to_string(status));
  std::string why;
  r.check(phys_test::holds<HostMem>(a->base(), p, &why), "fork.child_freed_nothing_of_parent", why);
  // The parent's allocator is unaffected: a new chunk is fresh.
  std::unique_ptr<Region> b;
  if (r.ok(Region::create(kHost, cb, cb, &b), "fork.parent_create") && r.ok(b->map_range(0, cb), "fork.parent_map"))
    r.check(phys_test::holds<HostMem>(b->base(), std::vector<uint8_t>(cb, 0), &why), "fork.parent_new_chunk_fresh", why);
}

// Every host allocation inside alias_range may fail: kOutOfMemory and nothing changed, or success.
void test_alias_allocation_failures(Report& r) {
  const size_t cb = kChunk;
  std::unique_ptr<Region> a, b;
  if (!r.ok(Region::create(kHost, 4 * cb, cb, &a), "alias_alloc.create_a") ||
      !r.ok(Region::create(kHost, 4 * cb, cb, &b), "alias_alloc.create_b") || !r.ok(a->map_range(0, 3 * cb), "alias_alloc.map"))
    return;
  int failures = 0;
  bool clean = true;
  std::string why;
  for (long n = 0; n < 100; ++n) {
    const phys_test::Snapshot before(*a, *b);
    g_fail_after = n;
    const Status s = b->alias_range(*a, 0, cb, 3 * cb);
    g_fail_after = -1;
    if (s.ok()) break;
    ++failures;
    if (clean && !(s.code() == Code::kOutOfMemory && phys_test::Snapshot(*a, *b) == before))
      why = "allocation " + std::to_string(n) + ": " + s.to_string();
    clean = clean && s.code() == Code::kOutOfMemory && phys_test::Snapshot(*a, *b) == before;
  }
  std::printf("info %d injected allocation failures in alias_range\n", failures);
  r.check(failures >= 3, "alias_alloc.failures_were_injected", std::to_string(failures));
  r.check(clean, "alias_alloc.each_is_oom_and_changes_nothing", why);
  r.check(b->is_mapped(cb, 3 * cb), "alias_alloc.finally_aliased");
}

}  // namespace

int main() {
  Report r;
  phys_test::run_all<HostMem>(r, kHost, kChunk);
  test_host_memfd(r);
  test_fork(r);
  test_alias_allocation_failures(r);
  phys_test::check_end(r, kHost);
  return r.finish();
}
