// µs per 2 MiB chunk on the host: the memfd chunks of the host backend (create, map, map of an
// existing chunk = alias, first touch, unmap, release) against the anonymous-memory path it replaced
// (mprotect to map, first touch, madvise(DONTNEED) + mprotect(PROT_NONE) to unmap). Median of
// `rounds` rounds of `chunks` chunks. Also: the first touch done by the kernel in one call
// (madvise(MADV_POPULATE_WRITE), Linux 5.14+) instead of one page fault per page, as a thread that
// maps ahead could do. A tuning aid, not a test:  ./bench_phys_chunks [chunks] [rounds]
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/apis.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace {

constexpr size_t kChunk = size_t(2) << 20;

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool ok(const pvt::Status& s, const char* what) {
  if (!s.ok()) std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
  return s.ok();
}

// Runs `step(i)` for every chunk; adds µs per chunk to samples[name].
template <typename Step>
bool timed(std::map<std::string, std::vector<double>>* samples, const char* name, size_t n, Step step) {
  const double t0 = now_us();
  for (size_t i = 0; i < n; ++i) {
    if (!step(i)) return false;
  }
  (*samples)[name].push_back((now_us() - t0) / static_cast<double>(n));
  return true;
}

bool memfd_round(std::map<std::string, std::vector<double>>* s, size_t n) {
  pvt::Backend* be = pvt::host_backend();
  void* base = nullptr;
  if (!ok(be->reserve(2 * n * kChunk, &base), "reserve")) return false;
  char* p = static_cast<char*>(base);
  std::vector<pvt::PhysHandle> h(n);
  const bool done =
      timed(s, "memfd create", n, [&](size_t i) { return ok(be->create_chunk(kChunk, &h[i]), "create"); }) &&
      timed(s, "memfd map (new chunk)", n, [&](size_t i) { return ok(be->map_chunk(p + i * kChunk, kChunk, h[i]), "map"); }) &&
      timed(s, "memfd first touch", n, [&](size_t i) { std::memset(p + i * kChunk, 1, kChunk); return true; }) &&
      timed(s, "memfd map of existing (alias)", n,
            [&](size_t i) { return ok(be->map_chunk(p + (n + i) * kChunk, kChunk, h[i]), "alias"); }) &&
      timed(s, "memfd unmap (touched mapping)", n, [&](size_t i) { return ok(be->unmap_chunk(p + i * kChunk, kChunk), "unmap"); }) &&
      timed(s, "memfd unmap (alias, untouched)", n,
            [&](size_t i) { return ok(be->unmap_chunk(p + (n + i) * kChunk, kChunk), "unmap alias"); }) &&
      timed(s, "memfd release", n, [&](size_t i) { return ok(be->release_chunk(h[i], kChunk), "release"); }) &&
      timed(s, "memfd create + map + populate", n, [&](size_t i) {
        return ok(be->create_chunk(kChunk, &h[i]), "create") && ok(be->map_chunk(p + i * kChunk, kChunk, h[i]), "map") &&
               madvise(p + i * kChunk, kChunk, MADV_POPULATE_WRITE) == 0;
      }) &&
      timed(s, "memfd unmap + release (populated)", n, [&](size_t i) {
        return ok(be->unmap_chunk(p + i * kChunk, kChunk), "unmap") && ok(be->release_chunk(h[i], kChunk), "release");
      });
  return ok(be->free_reservation(base, 2 * n * kChunk), "free") && done;
}

bool anon_round(std::map<std::string, std::vector<double>>* s, size_t n) {
  void* base = mmap(nullptr, n * kChunk, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return false;
  char* p = static_cast<char*>(base);
  const bool done =
      timed(s, "anon map (mprotect RW)", n,
            [&](size_t i) { return mprotect(p + i * kChunk, kChunk, PROT_READ | PROT_WRITE) == 0; }) &&
      timed(s, "anon first touch", n, [&](size_t i) { std::memset(p + i * kChunk, 1, kChunk); return true; }) &&
      timed(s, "anon unmap (madvise DONTNEED + mprotect NONE)", n, [&](size_t i) {
        return madvise(p + i * kChunk, kChunk, MADV_DONTNEED) == 0 && mprotect(p + i * kChunk, kChunk, PROT_NONE) == 0;
      });
  const bool populated = done && timed(s, "anon map + populate", n, [&](size_t i) {
    return mprotect(p + i * kChunk, kChunk, PROT_READ | PROT_WRITE) == 0 &&
           madvise(p + i * kChunk, kChunk, MADV_POPULATE_WRITE) == 0;
  });
  munmap(base, n * kChunk);
  return populated;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t chunks = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 128;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  std::map<std::string, std::vector<double>> samples;
  for (int r = 0; r < rounds; ++r) {
    if (!memfd_round(&samples, chunks) || !anon_round(&samples, chunks)) return 1;
  }
  std::printf("%zu chunks of 2 MiB, median of %d rounds, µs per chunk\n", chunks, rounds);
  for (auto& kv : samples) {
    std::sort(kv.second.begin(), kv.second.end());
    std::printf("  %-48s %8.2f  (min %.2f, max %.2f)\n", kv.first.c_str(), kv.second[kv.second.size() / 2],
                kv.second.front(), kv.second.back());
  }
  return 0;
}
