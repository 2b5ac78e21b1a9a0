// Where cudaGraphLaunch's tail comes from (PERFORMANCE_H200.md 6d): the step path of a watched
// slot cache is reserve_batch + one graph launch, and the launch's p99 decides the step's p99.
// Times 500 launches of a one-kernel graph (a spin of step_ms) in three ways: after the previous
// step finished (the device idle, as a scheduler that waits for sampling), with short steps
// (0.2 ms idle gaps), and pipelined (launched while the previous step still runs). Next to each,
// an empty timed region in the same loop (the VM's own jitter). p50 / p90 / p99 / max µs.
// Usage: bench_graph_launch [--blocking-sync] [--pin] (the context's sync mode; this thread on CPU 0).
#include <pthread.h>
#include <sched.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "step_timing.cuh"

using namespace pvt_bench;

namespace {

void print(const char* what, const std::vector<double>& launch, const std::vector<double>& empty) {
  std::printf("| %s | %zu | %.1f / %.1f / %.1f / %.1f | %.1f / %.1f / %.1f / %.1f |\n", what, launch.size(),
              pct(launch, 0.5), pct(launch, 0.9), pct(launch, 0.99), pct(launch, 1.0), pct(empty, 0.5),
              pct(empty, 0.9), pct(empty, 0.99), pct(empty, 1.0));
  std::fflush(stdout);
}

// One way of launching: `pipelined` launches step k while step k-1 runs (waits for k-2's end).
void run(const char* what, cudaStream_t s, long long cycles_per_ms, double step_ms, bool pipelined) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  spin_kernel<<<1, 1, 0, s>>>(static_cast<long long>(step_ms * cycles_per_ms));
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphUpload(exec, s));
  std::vector<cudaEvent_t> done(2);
  for (auto& e : done) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  std::vector<double> launch, empty;
  for (int i = 0; i < 520; ++i) {
    double t0 = now_us();
    empty.push_back(now_us() - t0);
    t0 = now_us();
    CK(cudaGraphLaunch(exec, s));
    const double took = now_us() - t0;
    if (i >= 20) launch.push_back(took);  // the first launches warm up
    CK(cudaEventRecord(done[i % 2], s));
    // Idle: wait for this step. Pipelined: wait for the previous one (this one runs meanwhile).
    if (!pipelined) CK(cudaEventSynchronize(done[i % 2]));
    if (pipelined && i > 0) CK(cudaEventSynchronize(done[(i + 1) % 2]));
  }
  CK(cudaStreamSynchronize(s));
  empty.erase(empty.begin(), empty.begin() + 20);
  print(what, launch, empty);
  for (auto& e : done) cudaEventDestroy(e);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
}

}  // namespace

int main(int argc, char** argv) {
  bool blocking = false, pin = false;
  for (int i = 1; i < argc; ++i) {
    blocking = blocking || std::strcmp(argv[i], "--blocking-sync") == 0;
    pin = pin || std::strcmp(argv[i], "--pin") == 0;
  }
  if (pin) {
    cpu_set_t first;
    CPU_ZERO(&first);
    CPU_SET(0, &first);
    if (pthread_setaffinity_np(pthread_self(), sizeof(first), &first) != 0) return 1;
  }
  if (blocking) CK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  int khz = 0;
  CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  cudaStream_t s = nullptr;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("sync mode %s, %s\n| launch | launches | cudaGraphLaunch p50 / p90 / p99 / max us | empty region p50 / p90 / p99 / max us |\n|---|---:|---|---|\n",
              blocking ? "blocking" : "auto (spin/yield)", pin ? "this thread on CPU 0" : "not pinned");
  run("after the step finished, 8 ms steps", s, khz, 8.0, false);
  run("after the step finished, 0.2 ms steps", s, khz, 0.2, false);
  run("while the previous step runs, 8 ms steps", s, khz, 8.0, true);
  cudaStreamDestroy(s);
  std::printf("bench done\n");
  return 0;
}
