// Quick native timing of decode_attention_cpu against a one-thread read of the same K/V bytes,
// for tuning the kernel without a Paddle build (the documented numbers come from the
// `bench-attention` subcommand). Usage: bench_attention_cpu B S HQ HKV D [f32|f16|bf16] [repeats]
// PADDLE_VTENSOR_BENCH_FLUSH=1 reads 128 MiB of other memory before each timed call (a cold cache, as
// bench-attention measures); PADDLE_VTENSOR_BENCH_PAGES=4k|huge backs K/V by mmap with MADV_NOHUGEPAGE or
// MADV_HUGEPAGE (default: std::vector).
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/decode_attention.h"

using namespace pvt;

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s B S HQ HKV D [f32|f16|bf16] [repeats]\n", argv[0]);
    return 2;
  }
  const int64_t B = std::atoll(argv[1]), S = std::atoll(argv[2]), Hq = std::atoll(argv[3]),
                Hkv = std::atoll(argv[4]), D = std::atoll(argv[5]);
  const std::string dt = argc > 6 ? argv[6] : "f32";
  const int reps = argc > 7 ? std::atoi(argv[7]) : 10;
  const ScalarType t = dt == "f16" ? ScalarType::kFloat16 : dt == "bf16" ? ScalarType::kBFloat16 : ScalarType::kFloat32;
  const int64_t eb = t == ScalarType::kFloat32 ? 4 : 2;
  const int64_t kv_elems = S * B * Hkv * D;
  std::vector<uint8_t> kvec, vvec, q(B * Hq * D * eb), out(B * Hq * D * eb);
  // K/V as spans so that they can live in mmap'd memory with a chosen page size.
  struct Span {
    uint8_t* p; size_t n;
    uint8_t* data() const { return p; }
    size_t size() const { return n; }
  };
  const char* pages = std::getenv("PADDLE_VTENSOR_BENCH_PAGES");
  auto make = [&](std::vector<uint8_t>& vec) -> Span {
    const size_t n = kv_elems * eb;
    if (pages == nullptr) { vec.resize(n); return {vec.data(), n}; }
    if (std::string(pages) == "region") {  // as the host backend: reserve, then commit 2 MiB chunks
      const size_t chunk = 2 << 20, total = (n + chunk - 1) / chunk * chunk;
      void* r = mmap(nullptr, 2 * total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      for (size_t off = 0; off < total; off += chunk)
        mprotect(static_cast<char*>(r) + off, chunk, PROT_READ | PROT_WRITE);
      return {static_cast<uint8_t*>(r), n};
    }
    void* m = mmap(nullptr, n + (2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t* a = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(m) + (2 << 20) - 1) & ~uintptr_t((2 << 20) - 1));
    madvise(a, n, std::string(pages) == "huge" ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    return {a, n};
  };
  Span k = make(kvec), v = make(vvec);
  const bool flush = std::getenv("PADDLE_VTENSOR_BENCH_FLUSH") != nullptr;
  std::vector<double> flush_buf(flush ? (128 << 20) / 8 : 0, 1.0);
  double flush_sink = 0;
  if (flush && std::string(std::getenv("PADDLE_VTENSOR_BENCH_FLUSH")) == "huge")  // as numpy's large arrays
    madvise(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(flush_buf.data()) & ~uintptr_t(4095)),
            flush_buf.size() * 8, MADV_HUGEPAGE);
  Span qspan{q.data(), q.size()};
  auto do_flush = [&] {
    for (double x : flush_buf) flush_sink += x;
  };
  std::mt19937 rng(1);
  // Small random values whose 16-bit patterns are finite in every dtype.
  for (Span* buf : {&k, &v, &qspan}) {
    for (size_t i = 0; i + 1 < buf->size(); i += 2) {
      const uint16_t x = static_cast<uint16_t>(0x3000 + (rng() & 0x7ff)) | ((rng() & 1) << 15);
      std::memcpy(buf->data() + i, &x, 2);
    }
  }
  if (t == ScalarType::kFloat32) {  // overwrite with proper floats
    std::uniform_real_distribution<float> u(-1, 1);
    for (Span* buf : {&k, &v, &qspan}) {
      float* f = reinterpret_cast<float*>(buf->data());
      for (size_t i = 0; i < buf->size() / 4; ++i) f[i] = u(rng);
    }
  }
  DecodeAttentionParams p;
  p.batch = B; p.q_len = 1; p.q_heads = Hq; p.kv_heads = Hkv; p.head_dim = D; p.kv_len = S;
  p.dtype = t; p.scale = 0.1f;
  p.q = q.data(); p.out = out.data(); p.k = k.data(); p.v = v.data();
  const int64_t qs[4] = {Hq * D, Hq * D, D, 1}, ks[4] = {B * Hkv * D, Hkv * D, D, 1};
  for (int i = 0; i < 4; ++i) { p.q_stride[i] = p.out_stride[i] = qs[i]; p.k_stride[i] = p.v_stride[i] = ks[i]; }
  double best_k = 1e9, best_r = 1e9, best_cpu_k = 1e9, best_cpu_r = 1e9;
  auto cpu_now = [] {  // this thread's CPU time: what a loaded machine's preemption does not inflate
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  };
  volatile float sink = 0;
  for (int r = 0; r < reps; ++r) {
    do_flush();
    const double c0 = cpu_now();
    auto t0 = std::chrono::steady_clock::now();
    const Status s = decode_attention_cpu(p);
    auto t1 = std::chrono::steady_clock::now();
    const double c1 = cpu_now();
    if (!s.ok()) { std::printf("%s\n", s.to_string().c_str()); return 1; }
    do_flush();
    const double c1r = cpu_now();
    auto t1r = std::chrono::steady_clock::now();
    float acc[16] = {0};
    for (Span* buf : {&k, &v}) {
      const float* f = reinterpret_cast<const float*>(buf->data());
      const size_t n = buf->size() / 4;
      for (size_t i = 0; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; ++j) acc[j] += f[i + j];
    }
    auto t2 = std::chrono::steady_clock::now();
    const double c2 = cpu_now();
    best_cpu_k = std::min(best_cpu_k, c1 - c0);
    best_cpu_r = std::min(best_cpu_r, c2 - c1r);
    for (float a : acc) sink = sink + a;
    best_k = std::min(best_k, std::chrono::duration<double>(t1 - t0).count());
    best_r = std::min(best_r, std::chrono::duration<double>(t2 - t1r).count());
  }
  const double bytes = 2.0 * kv_elems * eb;
  std::printf("B=%lld S=%lld Hq=%lld Hkv=%lld D=%lld %s: kernel %.3f ms (%.1f GB/s), read %.3f ms (%.1f GB/s), ratio %.2f; calling thread cpu: kernel %.3f ms, read %.3f ms\n",
              (long long)B, (long long)S, (long long)Hq, (long long)Hkv, (long long)D, dt.c_str(), best_k * 1e3,
              bytes / best_k / 1e9, best_r * 1e3, bytes / best_r / 1e9, best_k / best_r, best_cpu_k * 1e3, best_cpu_r * 1e3);
  if (flush_sink == 42) std::printf(" ");
  return 0;
}
