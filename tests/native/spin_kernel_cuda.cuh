// A kernel that spins for `cycles` SM clocks (~2 ms: 4,000,000 at 1.98 GHz): work still queued when a
// test releases or unmaps, or a model step's stand-in in the host-µs benchmarks. Defined here, not
// inline: include it in one translation unit per program (each native test and bench is one).
#pragma once

namespace pvt_test {

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace pvt_test
