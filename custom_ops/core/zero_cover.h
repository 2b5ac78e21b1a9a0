// ZeroCover: read-only zeros at every reserved place no chunk is mapped at (issue 30 point 4,
// CUDA; the host gets the same from its PROT_READ reservation). A kernel or cudaMemcpy that reads
// an unmapped part of a reservation (print / numpy() / a slice of a slot cache) then reads zeros
// instead of raising an illegal-address fault that kills the context. Writes there still fault: the
// cover is mapped read-only, and the ops refuse writes outside mapped rows before writing.
//
// Cost (H200 figures in docs/SLOT_CACHE.md): one zero mapping costs a cuMemMap and a
// cuMemSetAccess, ~35 µs each however long it is, and unmapping one ~22 µs; so the cover is made of
// *runs*, each one mapping of one shared zero handle of `granule` bytes (the largest run), and a
// reservation is covered by reserved/granule runs (a 100 GiB reservation: 1,600 runs of 64 MiB
// instead of 51,200 chunk-sized ones). Mapping a chunk inside a run unmaps the run and covers what
// is left of it on either side again (at most two runs); unmapping a chunk covers its place with
// one run. So the cost is one-off per reservation / granule, then a few driver calls per chunk
// mapped or unmapped, done where the mapping is done (ahead, by the background mapper).
// Bookkeeping: one entry per run; at most reserved/granule + 2 per chunk mapped so far.
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
  // Map `bytes` (at most the granule) of the zero handle read-only at `addr`; on failure nothing is mapped.
  virtual Status map_zero(uintptr_t addr, size_t bytes) = 0;
  // Unmap one whole zero run.
  virtual Status unmap_zero(uintptr_t addr, size_t bytes) = 0;
};

class ZeroCover {
 public:
  // granule: the largest run (at most the zero handle's size), a multiple of the mapping granularity.
  explicit ZeroCover(size_t granule) : granule_(granule) {}
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

  size_t granule_;
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> runs_;          // start -> length
  std::map<uintptr_t, size_t> reservations_;  // covered reservations: base -> bytes
};

}  // namespace pvt
