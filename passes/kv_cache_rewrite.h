// The whole-program rewrite behind vtensor_kv_cache_pass.
//
// Static Paddle runs a transpose as a copy (no stride kernels in the PIR executor), so a cache can
// only be appended in place if every tensor that holds it is in the VTensor's storage layout
// [S, B, H, D]. The rewrite therefore moves each KV cache to storage layout end to end:
//   - a cache the program takes as input (pd_op.data) now takes [S, B, H, D] (same input name);
//   - concat([past, new], axis=1) becomes custom_op.vtensor_append(past_storage, new);
//   - a cache the program returns (fetch / shadow_output) is returned as [S, B, H, D];
//   - a loop-carried cache (pd_op.while) is carried as [S, B, H, D]; a carried copy (pd_op.assign)
//     of it is dropped; a computed initial cache is migrated once per run (vtensor_from_dense);
//   - readers get storage-layout inputs: a transpose is re-permuted to read the storage, a shape is
//     gathered, PaddleNLP's attention chain becomes custom_op.vtensor_decode_attention when that op
//     is built in, and any other reader gets one transpose copy in logical layout (reported).
// It is all or nothing: when some concat that appends to a returned or carried cache cannot be
// rewritten, the program is left unchanged and the report says why.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "paddle/pir/include/core/block.h"
#include "paddle/pir/include/core/builder.h"
#include "paddle/pir/include/core/operation.h"
#include "paddle/pir/include/core/value.h"

#include "pass_report.h"

namespace pvt {

struct CacheOpAttrs {
  int64_t max_seq_len = 0;  // 0: the op's default
  int64_t chunk_bytes = 0;  // 0: the device granularity
};

class KvCacheRewrite {
 public:
  KvCacheRewrite(pir::Block* top, CacheOpAttrs attrs, PassReport* report);
  void Run();

 private:
  struct Site {  // one concat([past, new], axis=1) that appends to a returned or carried cache
    pir::Operation* concat;
    pir::Value past, tokens;
  };
  using LoopVar = std::pair<pir::Operation*, uint32_t>;  // (pd_op.while, loop variable index)

  void collect(pir::Block* block);
  bool analyze();
  bool reaches_boundary(pir::Value v) const;
  std::string destination(pir::Value v) const;  // where a cache value leaves: for messages
  bool check_past(const Site& site, std::string* why);

  pir::Value storage_of_input(pir::Operation* data_op);
  void convert_site(const Site& site);
  void convert_loop_var(const LoopVar& var);
  void rewire(pir::Value logical, const std::vector<std::pair<pir::Operation*, uint32_t>>& uses,
              pir::Value storage);
  pir::Value logical_copy(pir::Value storage, const std::string& reader);
  void erase_dead();

  pir::Block* top_;
  CacheOpAttrs attrs_;
  PassReport* report_;
  pir::Builder builder_;

  std::vector<pir::Operation*> concats_;  // every concat, in program order
  std::vector<Site> sites_;
  std::vector<pir::Operation*> inputs_;  // pd_op.data ops whose cache becomes storage layout
  std::set<LoopVar> loop_vars_;
  std::unordered_map<pir::Value, pir::Value> storage_;  // logical cache -> its storage view
  std::unordered_map<pir::Value, pir::Value> logical_copies_;
  std::set<pir::Operation*> created_, doomed_;
};

}  // namespace pvt
