// ZeroCover: read-only zeros at every reserved place no chunk is mapped at (issue 30 point 4,
// CUDA; the host gets the same from its PROT_READ reservation). A kernel or cudaMemcpy that reads
// an unmapped part of a reservation (print / numpy() / a slice of a slot cache) then reads zeros
// instead of raising an illegal-address fault that kills the context. Writes there still fault: the
// cover is mapped read-only, and the ops refuse writes outside mapped rows before writing.
//
// Cost (H200, docs/SLOT_CACHE.md): a zero mapping costs a cuMemMap and a cuMemSetAccess, ~35-38 µs
// for 2 to 64 MiB (71 µs for 512 MiB: per mapping, not per byte), unmapping one ~24 µs; so the
// cover is made of large *runs*. The driver maps only whole handles (a partial cuMemMap of a handle
// is CUDA_ERROR_NOT_SUPPORTED), so a run of 2^j units (unit = the mapping granularity) maps a zero
// handle of exactly that size, and runs are buddy blocks: 2^j units long, aligned to their length,
// at most `granule`. A reservation is covered by about reserved/granule runs (100 GiB at 64 MiB:
// 1,600 runs, 61 ms on the H200, instead of 51,200 chunk-sized ones, ~1.8 s). Mapping a chunk
// inside a run unmaps the run and covers the rest of it with buddy blocks (at most log2(run/unit)
// each side); a slot growing through a run chunk by chunk makes about one zero mapping per chunk in
// all. Unmapping a chunk covers its place again (a block or a few). So the cost is one-off per
// reservation/granule, then about one map + one unmap of zeros per chunk mapped, done where the
// mapping is done (ahead, by the background mapper). Zero handles: one of every size from the unit
// to the granule (2 x granule of memory per device). Bookkeeping: one entry per run.
//
// The driver calls go through ZeroMapper (the CUDA backend implements it; the native harness
// tests the run arithmetic on a recording fake). Thread-safe: one mutex; calls run under it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "status.h"

namespace pvt {

class ZeroMapper {
 public:
  virtual ~ZeroMapper() = default;
  // Map the zero handle of `bytes` (unit x 2^j, at most the granule; addr a multiple of it) read-only
  // at `addr`; on failure nothing is mapped.
  virtual Status map_zero(uintptr_t addr, size_t bytes) = 0;
  // Unmap one whole zero run.
  virtual Status unmap_zero(uintptr_t addr, size_t bytes) = 0;
};

class ZeroCover {
 public:
  // unit: the mapping granularity; granule: the largest run, rounded down to unit x 2^j (0: no cover).
  ZeroCover(size_t granule, size_t unit) : unit_(unit), granule_(round_granule(granule, unit)) {}
  static size_t round_granule(size_t granule, size_t unit);
  // Runs made from now on are at most `granule` long (those made stay as they are).
  void set_granule(size_t granule);
  size_t granule() const;
  // Covers a fresh reservation [base, base+bytes) with runs of at most granule, each starting on a
  // multiple of granule from base, and remembers it as covered (cover() does nothing elsewhere). On
  // failure the runs made are unmapped again and it is not remembered.
  Status cover_reservation(ZeroMapper& m, uintptr_t base, size_t bytes);
  // Before a chunk is mapped at [addr, addr+bytes): removes the zeros there (splitting runs).
  // On failure the cover is as before, or, when even putting a run back failed, that run's place is
  // left uncovered (reads there fault as without the cover) and the error is returned.
  Status uncover(ZeroMapper& m, uintptr_t addr, size_t bytes);
  // After a chunk was unmapped from [addr, addr+bytes) (or a map there failed): zeros there again.
  Status cover(ZeroMapper& m, uintptr_t addr, size_t bytes);
  // Unmaps every run inside [base, base+bytes), before the reservation is freed, and forgets it.
  Status drop_reservation(ZeroMapper& m, uintptr_t base, size_t bytes);
  size_t runs() const;
  // Bytes covered inside [addr, addr+bytes) (tests).
  size_t covered(uintptr_t addr, size_t bytes) const;

 private:
  // Maps [addr, addr+bytes) as runs of at most granule_ and records them; on failure unmaps them.
  Status map_runs(ZeroMapper& m, uintptr_t addr, size_t bytes);
  // Unmaps the runs starting inside [base, base+bytes) and forgets them (the first error is returned).
  Status unmap_runs(ZeroMapper& m, uintptr_t base, size_t bytes);

  const size_t unit_;
  size_t granule_;
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> runs_;          // start -> length
  std::map<uintptr_t, size_t> reservations_;  // covered reservations: base -> bytes
};

}  // namespace pvt
