// The host kernels' worker threads: a small pool of std::threads that sleep on a condition
// variable between calls (they never spin, so they take no core from Paddle's own OpenMP/MKL
// threads while Paddle runs its ops; a kernel call and a Paddle op never overlap on one stream of
// eager execution). Not OpenMP: Paddle's CPU wheel already loads two OpenMP runtimes (libiomp5
// and libgomp), and a third user of either from a custom op is a known source of oversubscription
// and of hangs after fork; a plain pool needs no build flag and runs the same in the native harness.
//
// Size: PADDLE_VTENSOR_NUM_THREADS if set (>= 1), else the CPUs this process may run on
// (sched_getaffinity, so taskset and container CPU sets are respected).
#pragma once

#include <cstdint>
#include <functional>

namespace pvt {

// Threads the pool runs a job on, the calling thread included.
int cpu_pool_threads();

// Calls fn(i) for every i in [0, n) on the calling thread and the pool's workers, each i once;
// returns when all are done. A call made while another thread's job runs executes inline.
void cpu_parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

}  // namespace pvt
