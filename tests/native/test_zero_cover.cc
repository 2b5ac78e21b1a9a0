// The zero cover's run arithmetic (core/zero_cover.h) on a recording fake of the driver: after
// every map or unmap of a chunk the zeros cover exactly the reserved places no chunk is mapped at,
// no two zero mappings overlap, every unmap names one whole mapping, every run is a whole zero
// handle (unit x 2^j, aligned to its size, at most the granule), and a reservation costs about
// reserved/granule mappings. Injected failures leave the cover
// as it was (or the failed run's place uncovered, never a mapping the bookkeeping does not know).
// The CUDA backend runs the same code with cuMemMap/cuMemSetAccess/cuMemUnmap (test_zero_reads.cu).
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>

#include "core/zero_cover.h"
#include "harness.h"

using namespace pvt;
using pvt_test::Report;

namespace {

constexpr size_t kUnit = 4096;  // the mapping granularity of the fake

class FakeDriver : public ZeroMapper {
 public:
  std::map<uintptr_t, size_t> zeros;  // what the "driver" has mapped
  size_t granule = 0;
  int fail_in = -1;                   // the map_zero call that fails (0: the next one)
  int maps = 0, unmaps = 0, bad = 0;  // bad: overlapping map, partial unmap, run over granule

  Status map_zero(uintptr_t addr, size_t bytes) override {
    if (fail_in >= 0 && fail_in-- == 0) return Status(Code::kDriver, "injected map_zero failure");
    auto next = zeros.lower_bound(addr);
    // A whole zero handle: unit x 2^j bytes, at most the granule, at a multiple of its size.
    const size_t units = bytes / kUnit;
    if (bytes > granule || bytes == 0 || bytes % kUnit != 0 || (units & (units - 1)) != 0 || addr % bytes != 0 || (next != zeros.end() && next->first < addr + bytes) ||
        (next != zeros.begin() && std::prev(next)->first + std::prev(next)->second > addr)) {
      ++bad;
    }
    zeros[addr] = bytes;
    ++maps;
    return Status::Ok();
  }
  Status unmap_zero(uintptr_t addr, size_t bytes) override {
    auto it = zeros.find(addr);
    if (it == zeros.end() || it->second != bytes) {
      ++bad;
      return Status(Code::kDriver, "not one whole mapping");
    }
    zeros.erase(it);
    ++unmaps;
    return Status::Ok();
  }
  size_t covered(uintptr_t lo, uintptr_t hi) const {
    size_t n = 0;
    for (const auto& z : zeros) {
      const uintptr_t a = std::max(lo, z.first), b = std::min(hi, z.first + z.second);
      if (b > a) n += b - a;
    }
    return n;
  }
};

void run(Report& r, size_t granule_units, size_t chunk_units, uint32_t seed) {
  const std::string tag = "granule " + std::to_string(granule_units) + " chunk " + std::to_string(chunk_units);
  FakeDriver d;
  ZeroCover cover(granule_units * kUnit, kUnit);
  d.granule = cover.granule();
  const uintptr_t base = (1 << 20) + 3 * kUnit;  // not aligned to the granule: smaller blocks at the edges
  const size_t chunks = 97, cb = chunk_units * kUnit, bytes = chunks * cb;
  if (!r.ok(cover.cover_reservation(d, base, bytes), tag + ": cover a reservation")) return;
  r.check(d.maps <= static_cast<int>(bytes / d.granule + 2 * 20), tag + ": about reserved/granule mappings",
          std::to_string(d.maps));
  std::set<size_t> mapped;
  std::mt19937 rng(seed);
  int wrong = 0, failures = 0;
  for (int step = 0; step < 2000; ++step) {
    const size_t c = rng() % chunks;
    const uintptr_t at = base + c * cb;
    const bool inject = rng() % 10 == 0;
    if (inject) d.fail_in = static_cast<int>(rng() % 2);
    if (!mapped.count(c)) {
      const Status st = cover.uncover(d, at, cb);
      if (st.ok()) {
        mapped.insert(c);
      } else {
        ++failures;  // the cover must be as before: checked below
      }
    } else {
      mapped.erase(c);
      if (!cover.cover(d, at, cb).ok()) {
        // A failed cover leaves the place wholly uncovered (documented): covering again works.
        ++failures;
        d.fail_in = -1;
        if (d.covered(at, at + cb) != 0 || !cover.cover(d, at, cb).ok()) ++wrong;
      }
    }
    d.fail_in = -1;
    for (size_t k = 0; k < chunks; ++k) {  // exactly the unmapped places are zeros
      const uintptr_t a = base + k * cb;
      if (d.covered(a, a + cb) != (mapped.count(k) ? 0 : cb)) ++wrong;
    }
    if (cover.covered(base, bytes) != d.covered(base, base + bytes)) ++wrong;
  }
  r.eq(wrong, 0, tag + ": after each of 2000 maps/unmaps the zeros are exactly the unmapped places");
  r.eq(d.bad, 0, tag + ": no overlapping map, partial unmap or run past the granule");
  r.check(failures > 0, tag + ": injected failures were hit", std::to_string(failures));
  r.eq(cover.runs(), d.zeros.size(), tag + ": the bookkeeping knows every zero mapping");
  r.ok(cover.drop_reservation(d, base, bytes), tag + ": drop the reservation");
  r.eq(d.zeros.size(), 0, tag + ": nothing left mapped");
  r.eq(cover.runs(), 0, tag + ": no run left");
  // A place of a reservation made without the cover is never covered.
  r.ok(cover.cover(d, base, cb), tag + ": cover() outside a covered reservation does nothing");
  r.eq(d.zeros.size(), 0, tag + ": still nothing mapped");
}

}  // namespace

int main() {
  Report r;
  run(r, 1, 1, 1);    // chunk-sized runs: every map is one unmap of a run
  run(r, 16, 1, 2);   // large runs split around the chunks
  run(r, 16, 4, 3);
  run(r, 5, 3, 4);    // a granule of 5 units is 4; chunks of 3 units straddle blocks
  run(r, 2, 8, 5);    // chunks larger than a run
  return r.finish();
}
