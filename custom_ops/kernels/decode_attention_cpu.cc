// Host decode attention (and the shared parameter check): plans the work and merges it; the inner
// loop is cpu_attention_tile.h, built per instruction set. Each batch entry's keys are cut into
// chunks, one work item each, run on all cores (cpu_thread_pool.h); every item streams its keys'
// K and V token rows once for all heads with an online softmax, leaving a partial (max, sum,
// unnormalised output) per query row; the partials of an entry merge by log-sum-exp. The
// variable-length fields (decode_attention.h) only change what each entry's item reads.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu_attention_item.h"
#include "cpu_thread_pool.h"
#include "decode_attention.h"
#include "decode_attention_cpu.h"
#include "float_convert.h"

namespace pvt {
namespace {

using host_float::bf16_to_float;
using host_float::float_to_bf16;
using host_float::float_to_half;
using host_float::half_to_float;

float load(const void* base, int64_t i, ScalarType t) {
  switch (t) {
    case ScalarType::kFloat32: return static_cast<const float*>(base)[i];
    case ScalarType::kFloat16: return half_to_float(static_cast<const uint16_t*>(base)[i]);
    case ScalarType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case ScalarType::kBool: return static_cast<const uint8_t*>(base)[i] ? 1.f : 0.f;
  }
  return 0.f;
}

void store(void* base, int64_t i, ScalarType t, float v) {
  switch (t) {
    case ScalarType::kFloat32: static_cast<float*>(base)[i] = v; return;
    case ScalarType::kFloat16: static_cast<uint16_t*>(base)[i] = float_to_half(v); return;
    case ScalarType::kBFloat16: static_cast<uint16_t*>(base)[i] = float_to_bf16(v); return;
    case ScalarType::kBool: return;  // never an output type (rejected by the check)
  }
}

// One strided row of `n` elements into floats.
void load_row(const void* base, int64_t offset, int64_t stride, int64_t n, ScalarType t, float* dst) {
  if (t == ScalarType::kFloat32 && stride == 1) {
    std::memcpy(dst, static_cast<const float*>(base) + offset, static_cast<size_t>(n) * 4);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = load(base, offset + i * stride, t);
}

bool is_float_type(ScalarType t) { return t != ScalarType::kBool; }

}  // namespace

const char* scalar_type_name(ScalarType t) {
  switch (t) {
    case ScalarType::kFloat32: return "float32";
    case ScalarType::kFloat16: return "float16";
    case ScalarType::kBFloat16: return "bfloat16";
    case ScalarType::kBool: return "bool";
  }
  return "unknown";
}

Status check_decode_attention_params(const DecodeAttentionParams& p) {
  const std::string op = "decode_attention: ";
  if (p.batch <= 0 || p.q_len <= 0 || p.q_heads <= 0 || p.kv_heads <= 0 || p.head_dim <= 0 ||
      p.kv_len <= 0) {
    return Status(Code::kInvalidArgument,
                  op + "sizes must be positive, got batch=" + std::to_string(p.batch) +
                      " q_len=" + std::to_string(p.q_len) + " q_heads=" + std::to_string(p.q_heads) +
                      " kv_heads=" + std::to_string(p.kv_heads) + " head_dim=" +
                      std::to_string(p.head_dim) + " kv_len=" + std::to_string(p.kv_len));
  }
  if (p.q_heads % p.kv_heads != 0) {
    return Status(Code::kInvalidArgument, op + "q_heads (" + std::to_string(p.q_heads) +
                                              ") must be a multiple of kv_heads (" +
                                              std::to_string(p.kv_heads) + ")");
  }
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.out == nullptr) {
    return Status(Code::kInvalidArgument, op + "q, k, v and out must all be set");
  }
  if (!is_float_type(p.dtype)) {
    return Status(Code::kInvalidArgument, op + "q/k/v must be float32, float16 or bfloat16, got " +
                                              scalar_type_name(p.dtype));
  }
  if (p.mask != nullptr && p.mask_type != ScalarType::kBool && p.mask_type != ScalarType::kFloat32 &&
      p.mask_type != p.dtype) {
    return Status(Code::kInvalidArgument, op + "the mask must be bool, float32 or " +
                                              scalar_type_name(p.dtype) + " (the dtype of q), got " +
                                              scalar_type_name(p.mask_type));
  }
  const bool varlen = p.cu_seqlens_q || p.kv_batch_index || p.cache_seqlens || p.kv_mapped;
  if (p.mask != nullptr && varlen) {
    return Status(Code::kInvalidArgument,
                  op + "a mask cannot be combined with cu_seqlens_q, kv_batch_index, cache_seqlens or "
                       "kv_mapped (the variable-length path is causal per entry)");
  }
  // With cu_seqlens_q, q_len only bounds the query counts; each entry is checked against its own.
  if (p.mask == nullptr && p.cu_seqlens_q == nullptr && p.kv_len < p.q_len) {
    return Status(Code::kInvalidArgument,
                  op + "without a mask the attention is causal and needs kv_len >= q_len, got kv_len=" +
                      std::to_string(p.kv_len) + " q_len=" + std::to_string(p.q_len));
  }
  if (!(std::isfinite(p.scale))) {
    return Status(Code::kInvalidArgument, op + "scale must be finite");
  }
  return Status::Ok();
}

namespace {

// One batch entry's view of the variable-length fields (decode_attention.h has the contract).
struct Entry {
  int64_t q_count = 0;     // its query rows
  int64_t kv_count = 0;    // keys it attends over (n_b); query t sees keys s < kv_count - q_count + t + 1
  int64_t slot = 0;        // the cache row it reads
  int64_t first_row = 0;   // its first query row: b * Tq, or cu_seqlens_q[b] (lse index)
  int64_t q_offset = 0;    // element offset of its query t = 0, head 0 (add t * q_stride[1])
  int64_t out_offset = 0;  // likewise in out
};

Entry entry(const DecodeAttentionParams& p, int64_t b) {
  Entry e;
  if (p.cu_seqlens_q != nullptr) {
    e.first_row = p.cu_seqlens_q[b];
    e.q_count = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    e.q_offset = e.first_row * p.q_stride[1];
    e.out_offset = e.first_row * p.out_stride[1];
  } else {
    e.first_row = b * p.q_len;
    e.q_count = p.q_len;
    e.q_offset = b * p.q_stride[0];
    e.out_offset = b * p.out_stride[0];
  }
  e.slot = p.kv_batch_index != nullptr ? p.kv_batch_index[b] : b;
  e.kv_count = p.cache_seqlens != nullptr ? p.cache_seqlens[e.slot] + e.q_count : p.kv_len;
  return e;
}

// The host reads the int32 arrays directly, so every value is checked before anything is written.
Status check_varlen_values(const DecodeAttentionParams& p) {
  const std::string op = "decode_attention: ";
  for (int64_t b = 0; b < p.batch; ++b) {
    const std::string at = "[" + std::to_string(b) + "]";
    if (p.cu_seqlens_q != nullptr) {
      const int64_t lo = p.cu_seqlens_q[b], hi = p.cu_seqlens_q[b + 1];
      if (lo < 0 || hi < lo || hi - lo > p.q_len) {
        return Status(Code::kInvalidArgument,
                      op + "cu_seqlens_q must be non-negative and non-decreasing with steps of at most "
                           "q_len=" + std::to_string(p.q_len) + ", got cu_seqlens_q" + at + "=" +
                           std::to_string(lo) + " and cu_seqlens_q[" + std::to_string(b + 1) + "]=" +
                           std::to_string(hi));
      }
    }
    if (p.kv_batch_index != nullptr && p.kv_batch_index[b] < 0) {
      return Status(Code::kInvalidArgument, op + "kv_batch_index" + at + "=" +
                                                std::to_string(p.kv_batch_index[b]) + " is negative");
    }
    const Entry e = entry(p, b);
    if (p.cache_seqlens != nullptr && p.cache_seqlens[e.slot] < 0) {
      return Status(Code::kInvalidArgument, op + "cache_seqlens[" + std::to_string(e.slot) + "]=" +
                                                std::to_string(p.cache_seqlens[e.slot]) + " is negative");
    }
    if (e.kv_count > p.kv_len || e.kv_count < e.q_count) {
      return Status(Code::kInvalidArgument,
                    op + "entry " + std::to_string(b) + " attends over " + std::to_string(e.kv_count) +
                        " keys with " + std::to_string(e.q_count) + " queries; kv_len=" +
                        std::to_string(p.kv_len) + " must bound every entry's keys, and each entry "
                        "needs at least as many keys as queries");
    }
  }
  return Status::Ok();
}

}  // namespace

namespace {

using cpu_attention::Item;

// The instruction-set build of the inner loop, picked at run time from what the CPU has;
// PADDLE_VTENSOR_CPU_ISA=scalar|avx2|avx512 asks for a lower one (tests, comparisons).
struct Isa {
  const char* name;
  int64_t width;
  void (*run)(const Item&);
};

int best_isa_level() {
  static const int best = [] {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) return 1;
#endif
    return 0;
  }();
  return best;
}

// -1: not asked for; else "scalar" 0, "avx2" 1, "avx512" 2.
int isa_level_of(const char* name) {
  const std::string want = name;
  return want == "scalar" ? 0 : want == "avx2" ? 1 : want == "avx512" ? 2 : -1;
}

// The level asked for: PADDLE_VTENSOR_CPU_ISA, read once per process, until
// decode_attention_cpu_set_isa changes it (tests and comparisons run every build in one process).
std::atomic<int>& asked_isa_level() {
  static std::atomic<int> asked{[] {
    const char* env = std::getenv("PADDLE_VTENSOR_CPU_ISA");
    return env != nullptr ? isa_level_of(env) : -1;
  }()};
  return asked;
}

Isa pick_isa() {
  const int best = best_isa_level();
  const int asked = asked_isa_level().load(std::memory_order_relaxed);
  const int level = asked >= 0 && asked < best ? asked : best;
  if (level == 2) return {"avx512", cpu_attention::kWidthAvx512, cpu_attention::run_item_avx512};
  if (level == 1) return {"avx2", cpu_attention::kWidthAvx2, cpu_attention::run_item_avx2};
  return {"scalar", cpu_attention::kWidthScalar, cpu_attention::run_item_scalar};
}

int elem_of(ScalarType t) {
  return t == ScalarType::kFloat16 ? cpu_attention::kF16
                                   : t == ScalarType::kBFloat16 ? cpu_attention::kBF16 : cpu_attention::kF32;
}

// Keys per work item: enough items for every thread to stay busy (4 per thread), few enough that
// each streams a long run of keys (at least kMinChunk).
constexpr int64_t kMinChunk = 256;
// Floats of per-item state (scores, accumulators) a group of entries may share: about 128 KiB,
// well inside a core's L2, so the accumulators stay cached while the K/V rows stream past.
// Bytes of K and V (an upper bound: kv_len keys for every entry) from which a call uses all threads.
constexpr int64_t kParallelBytes = int64_t(16) << 20;
constexpr int64_t kGroupFloats = 32 * 1024;

int64_t chunk_keys(int64_t total_keys, int threads) {
  const int64_t want = (total_keys + 4 * threads - 1) / (4 * threads);
  const int64_t c = want > kMinChunk ? want : kMinChunk;
  return (c + cpu_attention::kTile - 1) / cpu_attention::kTile * cpu_attention::kTile;
}

// What one entry needs across the three phases.
struct EntryPlan {
  Entry e;
  bool refused = false;
  int64_t rows = 0;         // q_heads * q_count
  int64_t q_at = 0;         // its query rows in `qbuf`
  int64_t bias_at = -1;     // its mask bias in `bias`, or -1
};

}  // namespace

const char* decode_attention_cpu_isa() { return pick_isa().name; }
bool decode_attention_cpu_set_isa(const char* name) {
  const int level = name == nullptr ? -1 : isa_level_of(name);
  if (name != nullptr && level < 0) return false;
  asked_isa_level().store(level, std::memory_order_relaxed);
  return true;
}
int decode_attention_cpu_threads() { return cpu_pool_threads(); }

Status decode_attention_cpu(const DecodeAttentionParams& p) {
  PVT_RETURN_IF_ERROR(check_decode_attention_params(p));
  PVT_RETURN_IF_ERROR(check_varlen_values(p));
  const Isa isa = pick_isa();
  // Small calls stay on the calling thread: waking the workers costs tens of microseconds on an
  // idle machine and up to a scheduler slice on a loaded one, more than one core needs to stream
  // a few MiB.
  const int64_t kv_bytes = 2 * p.kv_len * p.batch * p.kv_heads * p.head_dim *
                           (p.dtype == ScalarType::kFloat32 ? 4 : 2);
  const int threads = kv_bytes >= kParallelBytes ? cpu_pool_threads() : 1;
  const auto run_all = [threads](int64_t n, const std::function<void(int64_t)>& fn) {
    if (threads > 1) {
      cpu_parallel_for(n, fn);
    } else {
      for (int64_t i = 0; i < n; ++i) fn(i);
    }
  };
  const int64_t B = p.batch, D = p.head_dim, Hq = p.q_heads, Hkv = p.kv_heads, G = Hq / Hkv;
  const int64_t Dp = (D + isa.width - 1) / isa.width * isa.width;
  const bool convert = p.k_stride[3] != 1 || p.v_stride[3] != 1 || Dp != D;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // The mask as an additive float bias per entry, [Hm][Tq][S] (Hm = 1 when broadcast over heads).
  const int64_t Hm = p.mask != nullptr && p.mask_stride[1] != 0 ? Hq : 1;

  std::vector<EntryPlan> plan(static_cast<size_t>(B));
  int64_t q_floats = 0, bias_floats = 0, total_keys = 0, max_rows = 0;
  for (int64_t b = 0; b < B; ++b) {
    EntryPlan& ep = plan[b];
    ep.e = entry(p, b);
    ep.rows = Hq * ep.e.q_count;
    ep.refused = p.kv_mapped != nullptr && ep.e.kv_count > p.kv_mapped[ep.e.slot];
    if (ep.refused && p.error_flag != nullptr) *p.error_flag = 1;
    if (ep.refused || ep.rows == 0) continue;
    ep.q_at = q_floats;
    q_floats += ep.rows * Dp;
    if (p.mask != nullptr) {
      ep.bias_at = bias_floats;
      bias_floats += Hm * ep.e.q_count * ep.e.kv_count;
    }
    total_keys += ep.e.kv_count;
    max_rows = ep.rows > max_rows ? ep.rows : max_rows;
  }

  // Queries as float32 rows r = h * Tq + t, scaled, zero padded to Dp; the mask as a bias.
  std::vector<float> qbuf(static_cast<size_t>(q_floats), 0.f), bias(static_cast<size_t>(bias_floats));
  for (int64_t b = 0; b < B; ++b) {
    const EntryPlan& ep = plan[b];
    if (ep.refused || ep.rows == 0) continue;
    const int64_t tq = ep.e.q_count;
    for (int64_t h = 0; h < Hq; ++h) {
      for (int64_t t = 0; t < tq; ++t) {
        float* qr = qbuf.data() + ep.q_at + (h * tq + t) * Dp;
        load_row(p.q, ep.e.q_offset + t * p.q_stride[1] + h * p.q_stride[2], p.q_stride[3], D, p.dtype, qr);
        for (int64_t d = 0; d < D; ++d) qr[d] *= p.scale;
      }
    }
    if (ep.bias_at < 0) continue;
    const int64_t S = ep.e.kv_count;
    for (int64_t h = 0; h < Hm; ++h) {
      for (int64_t t = 0; t < tq; ++t) {
        float* br = bias.data() + ep.bias_at + (h * tq + t) * S;
        const int64_t base = b * p.mask_stride[0] + h * p.mask_stride[1] + t * p.mask_stride[2];
        for (int64_t s = 0; s < S; ++s) {
          const float m = load(p.mask, base + s * p.mask_stride[3], p.mask_type);
          br[s] = p.mask_type == ScalarType::kBool ? (m != 0.f ? 0.f : neg_inf) : m;
        }
      }
    }
  }

  // Groups of consecutive entries whose per-item state stays in cache; each group's keys in
  // chunks, one work item per (group, chunk), one EntryWork per entry in it, with its own partial
  // (m, l, acc), merged per entry below.
  std::vector<std::pair<int64_t, int64_t>> groups;  // [first, last) indices into `active`
  std::vector<int64_t> active, group_keys;
  for (int64_t b = 0; b < B; ++b) {
    if (!plan[b].refused && plan[b].rows > 0) active.push_back(b);
  }
  int64_t group_floats = 0;
  for (size_t i = 0; i < active.size(); ++i) {
    const EntryPlan& ep = plan[active[i]];
    const int64_t need = ep.rows * (cpu_attention::kTile + Dp + 2);
    if (groups.empty() || convert || group_floats + need > kGroupFloats) {
      groups.push_back({static_cast<int64_t>(i), static_cast<int64_t>(i)});
      group_keys.push_back(0);
      group_floats = 0;
    }
    groups.back().second = static_cast<int64_t>(i) + 1;
    group_keys.back() = std::max(group_keys.back(), ep.e.kv_count);
    group_floats += need;
  }
  int64_t total_keys_g = 0;
  for (int64_t n : group_keys) total_keys_g += n;
  (void)total_keys;
  const int64_t chunk = chunk_keys(total_keys_g, threads);
  const int64_t elem = p.dtype == ScalarType::kFloat32 ? 4 : 2;
  std::vector<Item> items;
  std::vector<cpu_attention::EntryWork> works;
  std::vector<int64_t> item_first_work, work_entry, work_part_at;
  std::vector<std::vector<int64_t>> entry_works(static_cast<size_t>(B));
  int64_t part_floats = 0, max_scratch = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int64_t s0 = 0; s0 < group_keys[g]; s0 += chunk) {
      Item it;
      it.k_s = p.k_stride[0]; it.k_h = p.k_stride[2]; it.k_d = p.k_stride[3];
      it.v_s = p.v_stride[0]; it.v_h = p.v_stride[2]; it.v_d = p.v_stride[3];
      it.elem = elem_of(p.dtype);
      it.convert = convert;
      it.kv_heads = Hkv;
      it.group = G;
      it.head_dim = D;
      it.padded_dim = Dp;
      it.s_begin = s0;
      it.s_end = std::min(s0 + chunk, group_keys[g]);
      item_first_work.push_back(static_cast<int64_t>(works.size()));
      int64_t scores = 0;
      for (int64_t i = groups[g].first; i < groups[g].second; ++i) {
        const int64_t b = active[i];
        const EntryPlan& ep = plan[b];
        if (ep.e.kv_count <= s0) continue;
        cpu_attention::EntryWork w;
        w.k = static_cast<const char*>(p.k) + ep.e.slot * p.k_stride[1] * elem;
        w.v = static_cast<const char*>(p.v) + ep.e.slot * p.v_stride[1] * elem;
        w.q_count = ep.e.q_count;
        w.kv_count = ep.e.kv_count;
        w.s_end = std::min(it.s_end, ep.e.kv_count);
        w.q = qbuf.data() + ep.q_at;
        if (ep.bias_at >= 0) {
          w.bias = bias.data() + ep.bias_at;
          w.bias_h = Hm == 1 ? 0 : ep.e.q_count * ep.e.kv_count;
          w.bias_t = ep.e.kv_count;
        }
        w.scores_at = scores;
        scores += ep.rows * cpu_attention::kTile;
        entry_works[b].push_back(static_cast<int64_t>(works.size()));
        work_entry.push_back(b);
        work_part_at.push_back(part_floats);
        part_floats += ep.rows * (Dp + 2);
        works.push_back(w);
      }
      it.n_entries = static_cast<int64_t>(works.size()) - item_first_work.back();
      max_scratch = std::max(max_scratch, scores + (convert ? 2 * cpu_attention::kTile * Hkv * Dp : 0));
      items.push_back(it);
    }
  }
  std::vector<float> parts(static_cast<size_t>(part_floats));
  for (size_t i = 0; i < works.size(); ++i) {
    const int64_t rows = plan[work_entry[i]].rows;
    works[i].m = parts.data() + work_part_at[i];
    works[i].l = works[i].m + rows;
    works[i].acc = works[i].l + rows;
  }
  for (size_t i = 0; i < items.size(); ++i) items[i].entries = works.data() + item_first_work[i];
  const size_t scratch = static_cast<size_t>(max_scratch);
  run_all(static_cast<int64_t>(items.size()), [&](int64_t i) {
    thread_local std::vector<float> tls;
    if (tls.size() < scratch) tls.resize(scratch);
    Item it = items[i];
    it.scratch = tls.data();
    isa.run(it);
  });

  // Merge the partials of each entry (log-sum-exp of the chunks), write out and lse.
  run_all(B, [&](int64_t b) {
    const EntryPlan& ep = plan[b];
    const std::vector<int64_t>& mine = entry_works[b];
    const int64_t tq = ep.e.q_count;
    std::vector<float> o(static_cast<size_t>(Dp));
    for (int64_t h = 0; h < Hq; ++h) {
      for (int64_t t = 0; t < tq; ++t) {
        const int64_t r = h * tq + t;
        float mx = neg_inf;
        for (int64_t w : mine) mx = std::max(mx, works[w].m[r]);
        float sum = 0.f;
        std::fill(o.begin(), o.end(), 0.f);
        if (!ep.refused && mx != neg_inf) {
          for (int64_t w : mine) {
            const float scale = std::exp(works[w].m[r] - mx);
            if (scale == 0.f) continue;
            sum += scale * works[w].l[r];
            const float* a = works[w].acc + r * Dp;
            for (int64_t d = 0; d < D; ++d) o[d] += scale * a[d];
          }
        }
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const int64_t base = ep.e.out_offset + t * p.out_stride[1] + h * p.out_stride[2];
        for (int64_t d = 0; d < D; ++d) store(p.out, base + d * p.out_stride[3], p.dtype, o[d] * inv);
        if (p.lse != nullptr) p.lse[(ep.e.first_row + t) * Hq + h] = sum > 0.f ? mx + std::log(sum) : neg_inf;
      }
    }
  });
  return Status::Ok();
}

}  // namespace pvt
