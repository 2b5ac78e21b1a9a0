// See cpu_thread_pool.h.
#include "cpu_thread_pool.h"

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

namespace pvt {
namespace {

int configured_threads() {
  if (const char* env = std::getenv("PADDLE_VTENSOR_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n >= 1) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n >= 1 ? static_cast<int>(n) : 1;
}

// One call's items. Shared by the workers that woke for it; one that wakes after the caller has
// returned finds no item left and never touches `fn` (which is the caller's, gone by then).
struct Job {
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t n = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
};

class Pool {
 public:
  explicit Pool(int threads) : threads_(threads), pid_(getpid()) {
    for (int i = 1; i < threads_; ++i) std::thread([this] { work(); }).detach();
  }
  int threads() const { return threads_; }
  pid_t pid() const { return pid_; }

  void run(int64_t n, const std::function<void(int64_t)>& fn) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock() || threads_ == 1 || n == 1) {  // another job runs, or nothing to share
      for (int64_t i = 0; i < n; ++i) fn(i);
      return;
    }
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->n = n;
    {
      std::lock_guard<std::mutex> g(mu_);
      job_ = job;
      ++generation_;
    }
    wake_.notify_all();
    drain(*job);
    // Wait for the items, not for the workers: on a loaded machine a worker may wake late.
    std::unique_lock<std::mutex> g(mu_);
    done_.wait(g, [&] { return job->done.load() == n; });
    job_.reset();
  }

 private:
  void drain(Job& job) {
    for (int64_t i = job.next.fetch_add(1); i < job.n; i = job.next.fetch_add(1)) {
      (*job.fn)(i);
      if (job.done.fetch_add(1) + 1 == job.n) {
        std::lock_guard<std::mutex> g(mu_);
        done_.notify_all();
      }
    }
  }
  void work() {
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> g(mu_);
        wake_.wait(g, [&] { return generation_ != seen; });
        seen = generation_;
        job = job_;
      }
      if (job) drain(*job);
    }
  }

  const int threads_;
  const pid_t pid_;
  std::mutex run_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::shared_ptr<Job> job_;
  uint64_t generation_ = 0;
};

// Never destroyed (workers are detached and sleep at exit). A forked child has none of the
// parent's threads, so it builds its own pool; the parent's copy is left alone.
Pool& pool() {
  static std::mutex mu;
  static Pool* current = nullptr;
  std::lock_guard<std::mutex> g(mu);
  if (current == nullptr || current->pid() != getpid()) current = new Pool(configured_threads());
  return *current;
}

}  // namespace

int cpu_pool_threads() { return pool().threads(); }

void cpu_parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  pool().run(n, fn);
}

}  // namespace pvt
