#include "background_mapper.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "lookahead.h"

namespace pvt {
namespace {

struct Job {
  AheadTicket ticket;
  AheadKind kind;
  std::shared_ptr<SlotCache> cache;
  std::vector<int64_t> slots, tokens;
};

struct Result {
  bool done = false;
  bool forgotten = false;
  Status status;
};

struct MapperState {
  std::mutex mu;
  std::condition_variable work;  // a job was queued
  std::condition_variable done;  // a job finished
  std::deque<Job> queue;
  Job* running = nullptr;        // the job the thread is carrying out (outside mu)
  std::map<AheadTicket, Result> results;
  AheadTicket next = 1;
  pid_t thread_pid = 0;          // the process whose thread serves the queue (0: none started)
  std::atomic<bool> batch_policy{false};  // the thread set SCHED_BATCH on itself
};

// Leaked on purpose, like the pool: the thread may run during static destruction.
MapperState& state() {
  static auto* s = new MapperState();
  return *s;
}

void finish(MapperState& s, AheadTicket ticket, const Status& st) {
  auto it = s.results.find(ticket);
  if (it == s.results.end()) return;
  if (it->second.forgotten) {
    s.results.erase(it);
  } else {
    it->second.done = true;
    it->second.status = st;
  }
}

void serve() {
  MapperState& s = state();
  // SCHED_BATCH (no privilege needed): a woken batch thread does not preempt the waker, so the
  // caller of map_ahead goes on on its CPU while the mapper waits for another (background_mapper.h).
  sched_param none{};
  none.sched_priority = 0;
  s.batch_policy = pthread_setschedparam(pthread_self(), SCHED_BATCH, &none) == 0;
  std::unique_lock<std::mutex> lock(s.mu);
  for (;;) {
    if (lookahead_watching()) {
      // Watched caches (lookahead.h): look at them, then sleep at most one poll unless work comes.
      lock.unlock();
      (void)lookahead_look();
      lock.lock();
      s.work.wait_for(lock, kLookaheadPoll, [&] { return !s.queue.empty(); });
    } else {
      s.work.wait(lock, [&] { return !s.queue.empty() || lookahead_watching(); });
    }
    if (s.queue.empty()) continue;
    Job job = std::move(s.queue.front());
    s.queue.pop_front();
    s.running = &job;
    lock.unlock();
    const Status st = job.kind == AheadKind::kBatch
                          ? job.cache->reserve_batch(job.slots, job.tokens, /*announced=*/true)
                          : job.cache->prefetch(job.slots, job.tokens);
    lock.lock();
    job.cache->ahead().leave(job.kind);  // under the lock: a fork sees the job either running or left
    s.running = nullptr;
    std::shared_ptr<SlotCache> last = std::move(job.cache);
    lock.unlock();
    // The mapper's reference goes before the batch counts as done (so a cache the caller dropped
    // is gone when wait returns), and without the lock (a dying cache waits for its streams).
    last.reset();
    lock.lock();
    finish(s, job.ticket, st);
    s.done.notify_all();
  }
}

// fork(): the mutex is taken around it so the child's copy is consistent; the child fails what the
// parent had queued (its caches' gates opened) and has no thread until its own first map_ahead.
void before_fork() { state().mu.lock(); }
void after_fork_parent() { state().mu.unlock(); }
void after_fork_child() {
  MapperState& s = state();
  const Status lost(Code::kUnsupported, "the process forked while this reservation was queued in the parent; "
                                        "reserve again in the child");
  for (Job& job : s.queue) job.cache->ahead().leave(job.kind);
  if (s.running != nullptr) s.running->cache->ahead().leave(s.running->kind);
  for (auto it = s.results.begin(); it != s.results.end();) {
    if (it->second.done) {
      ++it;
    } else if (it->second.forgotten) {
      it = s.results.erase(it);
    } else {
      it->second.done = true;
      it->second.status = lost;
      ++it;
    }
  }
  s.queue.clear();
  s.running = nullptr;
  s.thread_pid = 0;
  s.batch_policy = false;
  s.mu.unlock();
}
const int kAtForkRegistered = pthread_atfork(&before_fork, &after_fork_parent, &after_fork_child);

// Starts this process's mapper thread unless it runs (the caller holds s.mu).
Status start_locked(MapperState& s) {
  if (s.thread_pid == getpid()) return Status::Ok();
  try {
    std::thread(serve).detach();
  } catch (const std::system_error& e) {
    return Status(Code::kDriver, std::string("starting the background mapper thread failed: ") + e.what());
  }
  s.thread_pid = getpid();
  return Status::Ok();
}

}  // namespace

Status wake_mapper() {
  MapperState& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);  // a thread in its untimed wait re-checks after this
    PVT_RETURN_IF_ERROR(catch_bad_alloc("starting the background mapper", [&] { return start_locked(s); }));
  }
  s.work.notify_one();
  return Status::Ok();
}

Status map_ahead(std::shared_ptr<SlotCache> cache, std::vector<int64_t> slots, std::vector<int64_t> tokens,
                 AheadTicket* ticket, AheadKind kind) {
  (void)kAtForkRegistered;
  *ticket = 0;
  PVT_RETURN_IF_ERROR(cache->check_batch(slots, tokens));
  MapperState& s = state();
  const Status st = catch_bad_alloc("reserve_slots_async", [&]() -> Status {
    std::lock_guard<std::mutex> lock(s.mu);
    PVT_RETURN_IF_ERROR(start_locked(s));
    const AheadTicket t = s.next;
    auto slot = s.results.emplace(t, Result()).first;  // may throw: nothing queued yet
    try {
      s.queue.push_back(Job{t, kind, cache, std::move(slots), std::move(tokens)});
    } catch (const std::bad_alloc&) {
      s.results.erase(slot);
      throw;
    }
    ++s.next;
    // Announced under the mapper's lock, before the thread can see the job: it leaves what it entered.
    cache->ahead().enter(kind);
    *ticket = t;
    return Status::Ok();
  });
  // After the lock is dropped: the woken thread does not block at once on the mutex we hold.
  if (st.ok()) s.work.notify_one();
  return st;
}

bool mapper_runs_as_batch() { return state().batch_policy.load(); }

Status wait_ahead(AheadTicket ticket) {
  MapperState& s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  auto it = s.results.find(ticket);
  if (it == s.results.end() || it->second.forgotten) {
    return catch_bad_alloc("wait", [&] {
      return Status(Code::kInvalidArgument, "ticket " + std::to_string(ticket) +
                                                " is not pending (never handed out, or already waited for)");
    });
  }
  s.done.wait(lock, [&] { return it->second.done; });
  const Status st = it->second.status;
  s.results.erase(it);
  return st;
}

bool ahead_done(AheadTicket ticket) {
  MapperState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.results.find(ticket);
  return it != s.results.end() && it->second.done;
}

void forget_ahead(AheadTicket ticket) {
  MapperState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.results.find(ticket);
  if (it == s.results.end()) return;
  if (it->second.done) {
    s.results.erase(it);
  } else {
    it->second.forgotten = true;
  }
}

size_t ahead_tickets() {
  MapperState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  size_t n = 0;
  for (const auto& r : s.results) n += r.second.forgotten ? 0 : 1;
  return n;
}

}  // namespace pvt
