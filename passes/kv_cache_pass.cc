// vtensor_kv_cache_pass: the PIR pass that makes a static program append its KV caches in place
// (see kv_cache_rewrite.h for what it changes). Registered by name when the extension loads, so
//   paddle.pir.PassManager().add_pass("vtensor_kv_cache_pass", {})
//   paddle.inference.Config.enable_custom_passes(["vtensor_kv_cache_pass"])
// both find it once paddle_vtensor's ops are loaded. Attributes (pass attrs from Python, else the
// environment): max_seq_len / PADDLE_VTENSOR_MAX_SEQ_LEN (tokens a migrated cache reserves) and
// chunk_bytes / PADDLE_VTENSOR_CHUNK_BYTES; "quiet" (bool) leaves the logging to the caller.
#include <cstdlib>
#include <iostream>
#include <string>

#include "paddle/pir/include/core/builtin_op.h"
#include "paddle/pir/include/pass/pass.h"
#include "paddle/pir/include/pass/pass_registry.h"

#include "../custom_ops/op_names.h"
#include "kv_cache_rewrite.h"
#include "pass_report.h"

namespace {

using pvt::names::kKvCachePass;
constexpr const char* kPassName = kKvCachePass;

class VTensorKvCachePass : public pir::Pass {
 public:
  VTensorKvCachePass() : pir::Pass(kPassName, /*opt_level=*/1) {}

  bool CanApplyOn(pir::Operation* op) const override {
    return op->isa<pir::ModuleOp>() && op->num_regions() > 0;
  }

  void Run(pir::Operation* op) override {
    pvt::PassReport& report = pvt::last_report();
    report.clear();
    pvt::KvCacheRewrite rewrite(&op->dyn_cast<pir::ModuleOp>().block(), attrs(), &report);
    rewrite.Run();
    AddStatistics(report.appends);
    if (!flag(pvt::names::kPassQuiet)) log(report);
  }

 private:
  int64_t int_attr(const char* key, const char* env) const {
    if (Has(key)) {
      try {
        return Get<int>(key);
      } catch (...) {
        return Get<int64_t>(key);
      }
    }
    const char* value = std::getenv(env);
    return value != nullptr ? std::atoll(value) : 0;
  }

  bool flag(const char* key) const {
    if (!Has(key)) return false;
    try {
      return Get<bool>(key);
    } catch (...) {
      return false;
    }
  }

  pvt::CacheOpAttrs attrs() const {
    pvt::CacheOpAttrs a;
    a.max_seq_len = int_attr(pvt::names::kMaxSeqLen, pvt::names::kEnvMaxSeqLen);
    a.chunk_bytes = int_attr(pvt::names::kChunkBytes, pvt::names::kEnvChunkBytes);
    return a;
  }

  static void log(const pvt::PassReport& r) {
    for (const auto& why : r.refused) std::cerr << kPassName << ": program left unchanged: " << why << "\n";
    for (const auto& note : r.notes) std::cerr << kPassName << ": nothing to rewrite: " << note << "\n";
    if (r.appends == 0) return;
    std::cerr << kPassName << ": " << r.appends << " cache appends, " << r.attentions << " attentions, "
              << r.assigns_removed << " assigns removed\n";
    for (const auto& name : r.storage_inputs) {
      std::cerr << kPassName << ": input '" << name << "' now takes the cache as [seq, batch, heads, head_dim]\n";
    }
    for (const auto& out : r.storage_outputs) {
      std::cerr << kPassName << ": " << out << " now gives the cache as [seq, batch, heads, head_dim]\n";
    }
    for (const auto& copy : r.copies) std::cerr << kPassName << ": remaining copy: " << copy << "\n";
  }
};

}  // namespace

PVT_REGISTER_IR_PASS(PVT_PASS_KV_CACHE, VTensorKvCachePass);
