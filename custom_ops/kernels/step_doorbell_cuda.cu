// StepDoorbell (step_doorbell_cuda.h): the gate and done kernels, the graph around the caller's
// step, the launcher thread and the host side of the bell.
#include "step_doorbell_cuda.h"

#include <immintrin.h>

#include <chrono>
#include <new>
#include <string>

namespace pvt {

// One cache line each: the host writes bell and cancel_after, the device writes done.
struct StepDoorbell::Words {
  alignas(64) uint64_t bell;          // steps released by the host
  alignas(64) uint64_t cancel_after;  // steps past this one skip their body (UINT64_MAX: none)
  alignas(64) uint64_t done;          // steps finished on the device
};

// The words' owner, shared with the caches that use the steps (StepCounters).
class StepDoorbell::Counters final : public StepCounters {
 public:
  explicit Counters(Words* w) : words(w) {}
  ~Counters() override { cudaFreeHost(words); }
  uint64_t issued() const override { return __atomic_load_n(&words->bell, __ATOMIC_ACQUIRE); }
  uint64_t finished() const override { return __atomic_load_n(&words->done, __ATOMIC_ACQUIRE); }
  bool retired() const override { return retired_.load(std::memory_order_acquire); }
  Words* const words;
  std::atomic<bool> retired_{false};
};

namespace {

constexpr uint64_t kNoCancel = ~uint64_t(0);

// Step n waits for its ring, then runs its body unless stop() cancelled it. The sleep keeps the poll
// of host memory to about one read a microsecond.
__global__ void doorbell_gate(cudaGraphConditionalHandle cond, const volatile uint64_t* bell,
                              const volatile uint64_t* cancel_after, uint64_t* counter) {
  const uint64_t n = *counter + 1;
  *counter = n;
  while (*bell < n) __nanosleep(500);
  // stop() writes cancel_after before the bell: seen the bell, see the cancel (host stores are ordered).
  __threadfence_system();
  cudaGraphSetConditional(cond, n <= *cancel_after ? 1u : 0u);
}

// After the body (or its skip): step n is finished, visible to the host without a driver call.
__global__ void doorbell_done(volatile uint64_t* done, const uint64_t* counter) {
  __threadfence_system();
  *done = *counter;
}

Status runtime_error(const char* what, cudaError_t e) {
  const Code code = e == cudaErrorInvalidValue || e == cudaErrorNotSupported || e == cudaErrorInvalidResourceHandle ||
                            e == cudaErrorStreamCaptureUnsupported || e == cudaErrorGraphExecUpdateFailure
                        ? Code::kInvalidArgument
                        : Code::kDriver;
  return Status(code, std::string("step doorbell: ") + what + ": " + cudaGetErrorName(e) + " (" +
                          cudaGetErrorString(e) + ")");
}

#define PVT_DOORBELL_CALL(what, call)                     \
  do {                                                    \
    const cudaError_t e_ = (call);                        \
    if (e_ != cudaSuccess) return runtime_error(what, e_); \
  } while (0)

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Status StepDoorbell::create(cudaGraph_t body, cudaStream_t stream, const std::vector<cudaEvent_t>& record_after,
                            int depth, std::unique_ptr<StepDoorbell>* out) {
  if (body == nullptr) return Status(Code::kInvalidArgument, "step doorbell: the step's graph is null");
  if (stream == nullptr) {
    return Status(Code::kInvalidArgument,
                  "step doorbell: give a stream of its own, not the legacy default stream (it would order "
                  "every other stream's work behind the waiting gates)");
  }
  if (depth < 1) {
    return Status(Code::kInvalidArgument, "step doorbell: depth (launches ahead of the last ring) must be >= 1, got " +
                                              std::to_string(depth));
  }
  for (cudaEvent_t e : record_after) {
    if (e == nullptr) return Status(Code::kInvalidArgument, "step doorbell: an event to record after each step is null");
  }
  std::unique_ptr<StepDoorbell> d(new StepDoorbell());
  d->stream_ = stream;
  d->depth_ = depth;
  d->stopped_ = true;  // until the first launch: the destructor then only frees
  PVT_DOORBELL_CALL("host words", cudaHostAlloc(reinterpret_cast<void**>(&d->words_), sizeof(Words), cudaHostAllocMapped));
  try {
    d->shared_ = std::make_shared<Counters>(d->words_);
  } catch (const std::bad_alloc&) {
    cudaFreeHost(d->words_);
    d->words_ = nullptr;
    return Status(Code::kOutOfMemory, "step doorbell: no host memory for its counters");
  }
  d->words_->bell = 0;
  d->words_->cancel_after = kNoCancel;
  d->words_->done = 0;
  PVT_DOORBELL_CALL("device view of the words", cudaHostGetDevicePointer(reinterpret_cast<void**>(&d->words_dev_), d->words_, 0));
  PVT_DOORBELL_CALL("step counter", cudaMalloc(reinterpret_cast<void**>(&d->counter_), sizeof(uint64_t)));
  PVT_DOORBELL_CALL("step counter", cudaMemset(d->counter_, 0, sizeof(uint64_t)));

  PVT_DOORBELL_CALL("graph", cudaGraphCreate(&d->graph_, 0));
  cudaGraphConditionalHandle cond;  // 0 at every launch unless the gate sets it
  PVT_DOORBELL_CALL("condition", cudaGraphConditionalHandleCreate(&cond, d->graph_, 0, cudaGraphCondAssignDefault));
  const volatile uint64_t* bell = &d->words_dev_->bell;
  const volatile uint64_t* cancel = &d->words_dev_->cancel_after;
  volatile uint64_t* done = &d->words_dev_->done;
  void* gate_args[] = {&cond, &bell, &cancel, &d->counter_};
  cudaKernelNodeParams gate_p = {};
  gate_p.func = reinterpret_cast<void*>(doorbell_gate);
  gate_p.gridDim = dim3(1);
  gate_p.blockDim = dim3(1);
  gate_p.kernelParams = gate_args;
  cudaGraphNode_t gate, cond_node, child, done_node;
  PVT_DOORBELL_CALL("gate node", cudaGraphAddKernelNode(&gate, d->graph_, nullptr, 0, &gate_p));
  cudaGraphNodeParams if_p = {};
  if_p.type = cudaGraphNodeTypeConditional;
  if_p.conditional.handle = cond;
  if_p.conditional.type = cudaGraphCondTypeIf;
  if_p.conditional.size = 1;
  PVT_DOORBELL_CALL("IF node", cudaGraphAddNode(&cond_node, d->graph_, &gate, nullptr, 1, &if_p));
  PVT_DOORBELL_CALL("the step as the IF node's body",
                    cudaGraphAddChildGraphNode(&child, if_p.conditional.phGraph_out[0], nullptr, 0, body));
  void* done_args[] = {&done, &d->counter_};
  cudaKernelNodeParams done_p = gate_p;
  done_p.func = reinterpret_cast<void*>(doorbell_done);
  done_p.kernelParams = done_args;
  PVT_DOORBELL_CALL("done node", cudaGraphAddKernelNode(&done_node, d->graph_, &cond_node, 1, &done_p));
  cudaGraphNode_t last = done_node;
  for (cudaEvent_t e : record_after) {
    cudaGraphNode_t rec;
    PVT_DOORBELL_CALL("event record node", cudaGraphAddEventRecordNode(&rec, d->graph_, &last, 1, e));
    last = rec;
  }
  PVT_DOORBELL_CALL("instantiate (a body with host or event nodes cannot run under an IF node)",
                    cudaGraphInstantiate(&d->exec_, d->graph_, 0));
  PVT_DOORBELL_CALL("upload", cudaGraphUpload(d->exec_, stream));
  PVT_DOORBELL_CALL("upload", cudaStreamSynchronize(stream));
  d->launch_us_.reserve(1 << 16);
  // From the first launch on, destroying d must cancel and drain what was launched (stop()).
  d->stopped_ = false;
  // The first `depth` launches, before create returns: the first ring finds its step queued.
  for (int i = 0; i < depth; ++i) {
    PVT_DOORBELL_CALL("launch", cudaGraphLaunch(d->exec_, stream));
    d->launched_.fetch_add(1, std::memory_order_release);
  }
  d->launcher_ = std::thread([p = d.get()] { p->launch_loop(); });
  *out = std::move(d);
  return Status::Ok();
}

// Keeps `depth_` launches ahead of the last ring. Polls the bell every 20 µs: a launch is needed once
// a step (8-16 ms of a decode step), so the poll's latency never shows.
void StepDoorbell::launch_loop() {
  while (!stopping_.load(std::memory_order_acquire)) {
    const uint64_t rung = __atomic_load_n(&words_->bell, __ATOMIC_ACQUIRE);
    if (launched_.load(std::memory_order_relaxed) >= rung + static_cast<uint64_t>(depth_)) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      continue;
    }
    const double t0 = now_us();
    const cudaError_t e = cudaGraphLaunch(exec_, stream_);
    if (launch_us_.size() < launch_us_.capacity()) launch_us_.push_back(now_us() - t0);
    if (e != cudaSuccess) {
      launch_error_.store(static_cast<int>(e), std::memory_order_release);
      return;
    }
    launched_.fetch_add(1, std::memory_order_release);
  }
}

Status StepDoorbell::ring(uint64_t* step) {
  const int err = launch_error_.load(std::memory_order_acquire);
  if (err != 0) return runtime_error("a launch on the launcher thread", static_cast<cudaError_t>(err));
  if (stopping_.load(std::memory_order_relaxed)) {
    return Status(Code::kInvalidArgument, "step doorbell: ring after stop(); create a new doorbell");
  }
  *step = ++rung_;
  __atomic_store_n(&words_->bell, rung_, __ATOMIC_RELEASE);
  return Status::Ok();
}

std::shared_ptr<const StepCounters> StepDoorbell::counters() const { return shared_; }

uint64_t StepDoorbell::done() const { return __atomic_load_n(&words_->done, __ATOMIC_ACQUIRE); }

bool StepDoorbell::wait_done(uint64_t step, double timeout_us, double yield_after_us) const {
  const double t0 = now_us();
  for (uint32_t i = 0;; ++i) {
    if (done() >= step) return true;
    if ((i & 255) == 0) {
      const double waited = now_us() - t0;
      if (waited > timeout_us) return false;
      if (waited > yield_after_us) std::this_thread::yield();
    }
    _mm_pause();
  }
}

Status StepDoorbell::stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_) return Status::Ok();
  stopped_ = true;
  stopping_.store(true, std::memory_order_release);
  if (launcher_.joinable()) launcher_.join();
  // Cancel what was launched and not rung, then let every launched gate through (cancel first: a
  // gate that sees the new bell sees the cancel).
  const uint64_t launched = launched_.load(std::memory_order_acquire);
  __atomic_store_n(&words_->cancel_after, rung_, __ATOMIC_RELEASE);
  __atomic_store_n(&words_->bell, launched, __ATOMIC_RELEASE);
  const bool finished = wait_done(launched, 10e6);
  const int err = launch_error_.load(std::memory_order_acquire);
  if (err != 0) return runtime_error("a launch on the launcher thread", static_cast<cudaError_t>(err));
  if (!finished) {
    return Status(Code::kDriver, "step doorbell: the launched steps did not finish within 10 s of stop() (" +
                                     std::to_string(done()) + " of " + std::to_string(launched) + " done)");
  }
  PVT_DOORBELL_CALL("stream after stop", cudaStreamSynchronize(stream_));
  shared_->retired_.store(true, std::memory_order_release);
  return Status::Ok();
}

StepDoorbell::~StepDoorbell() {
  (void)stop();
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  if (counter_ != nullptr) cudaFree(counter_);
}

}  // namespace pvt
