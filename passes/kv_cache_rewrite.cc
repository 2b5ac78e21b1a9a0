#include "kv_cache_rewrite.h"

#include <algorithm>
#include <string>

#include "paddle/common/ddim.h"

#include "paddle/fluid/pir/dialect/operator/ir/op_attribute.h"
#include "paddle/pir/include/core/block_argument.h"
#include "paddle/pir/include/core/builtin_attribute.h"
#include "paddle/pir/include/core/ir_context.h"

#include "../custom_ops/op_names.h"
#include "attention_rewrite.h"
#include "ir_helpers.h"

namespace pvt {
namespace {

const std::vector<int> kIdentity4 = {0, 1, 2, 3};

// concat([a, b], axis) with two rank-4 float inputs of one dtype: the shape of a cache append.
bool two_input_concat(pir::Operation* concat, pir::Value* a, pir::Value* b, double* axis) {
  if (!is_op(concat, "pd_op.concat") || concat->num_operands() != 2) return false;
  pir::Operation* combine = concat->operand_source(0).defining_op();
  if (!is_op(combine, "builtin.combine") || combine->num_operands() != 2) return false;
  *a = combine->operand_source(0);
  *b = combine->operand_source(1);
  if (rank_of(*a) != 4 || rank_of(*b) != 4 || rank_of(concat->result(0)) != 4) return false;
  if (dense_type(*a).dtype() != dense_type(*b).dtype() || !is_kv_dtype(dense_type(*a).dtype())) return false;
  return constant_scalar(concat->operand_source(1), axis);
}

bool dims_agree(int64_t x, int64_t y) { return x < 0 || y < 0 || x == y; }

pir::Operation* while_of_block_arg(pir::Value v, uint32_t* index) {
  auto arg = v.dyn_cast<pir::BlockArgument>();
  if (!arg || arg.owner() == nullptr) return nullptr;
  pir::Operation* parent = arg.owner()->GetParentOp();
  if (!is_op(parent, "pd_op.while")) return nullptr;
  *index = arg.index();
  return parent;
}

pir::Block& body_of(pir::Operation* while_op) { return while_op->region(0).front(); }

// Follows pd_op.assign copies forward from `v`.
bool flows_into(pir::Value v, pir::Value target) {
  if (v == target) return true;
  pir::Operation* op = target.defining_op();
  return is_op(op, "pd_op.assign") && flows_into(v, op->operand_source(0));
}

}  // namespace

KvCacheRewrite::KvCacheRewrite(pir::Block* top, CacheOpAttrs attrs, PassReport* report)
    : top_(top), attrs_(attrs), report_(report), builder_(pir::IrContext::Instance(), top) {}

void KvCacheRewrite::collect(pir::Block* block) {
  for (auto& op : *block) {
    if (is_op(&op, "pd_op.concat")) concats_.push_back(&op);
    for (uint32_t r = 0; r < op.num_regions(); ++r) {
      for (auto& inner : op.region(r)) collect(&inner);
    }
  }
}

std::string KvCacheRewrite::destination(pir::Value v) const {
  for (const auto& [owner, index] : uses_of(v)) {
    if (is_op(owner, "pd_op.fetch") || is_op(owner, "builtin.shadow_output")) return "returned as " + describe(owner);
    if (is_op(owner, "cf.yield")) return "carried as while-loop variable " + std::to_string(index - 1);
    if (is_op(owner, "pd_op.assign") && reaches_boundary(owner->result(0))) return destination(owner->result(0));
  }
  return "(not returned)";
}

bool KvCacheRewrite::reaches_boundary(pir::Value v) const {
  for (const auto& [owner, index] : uses_of(v)) {
    if (is_op(owner, "pd_op.fetch") || is_op(owner, "builtin.shadow_output")) return true;
    if (is_op(owner, "cf.yield") && is_op(owner->GetParentOp(), "pd_op.while") && index > 0) return true;
    if (is_op(owner, "pd_op.assign") && reaches_boundary(owner->result(0))) return true;
  }
  return false;
}

bool KvCacheRewrite::check_past(const Site& site, std::string* why) {
  pir::Operation* def = site.past.defining_op();
  if (is_op(def, "pd_op.data")) return true;
  for (const Site& earlier : sites_) {
    if (earlier.concat == def) return true;  // an append of an append (several steps in one program)
  }
  uint32_t index = 0;
  if (pir::Operation* loop = while_of_block_arg(site.past, &index)) {
    pir::Operation* yield = &body_of(loop).back();
    if (is_op(yield, "cf.yield") && yield->num_operands() > index + 1 &&
        flows_into(site.concat->result(0), yield->operand_source(index + 1))) {
      return true;
    }
    *why = "loop variable " + std::to_string(index) + " of the while loop is not replaced by this concat's result";
    return false;
  }
  *why = "its past cache is computed inside the program by " + describe(def) +
         ", not taken as an input or carried by a loop, so an in-place append has nothing to reuse";
  return false;
}

bool KvCacheRewrite::analyze() {
  for (pir::Operation* concat : concats_) {
    pir::Value past, tokens;
    double axis = 0;
    if (!two_input_concat(concat, &past, &tokens, &axis)) continue;
    if (axis != 1 && axis != -3) continue;  // rotate_half, heads, ...: not a sequence append
    if (!reaches_boundary(concat->result(0))) continue;  // not the next cache
    const std::string where = "the concat whose result is " + destination(concat->result(0));
    const auto& p = dense_type(past).dims();
    const auto& t = dense_type(tokens).dims();
    if (!dims_agree(p[0], t[0]) || !dims_agree(p[2], t[2]) || !dims_agree(p[3], t[3])) {
      report_->refused.push_back(where + ": past and new tokens differ in batch, heads or head_dim");
      continue;
    }
    Site site{concat, past, tokens};
    std::string why;
    if (!check_past(site, &why)) {
      report_->refused.push_back(where + ": " + why);
      continue;
    }
    sites_.push_back(site);
  }
  if (!report_->refused.empty()) return false;
  if (sites_.empty()) {
    report_->notes.push_back(
        "no concat appends along axis 1 to a rank-4 cache that the program returns or carries");
    return false;
  }
  return true;
}

pir::Value KvCacheRewrite::storage_of_input(pir::Operation* data_op) {
  pir::Value logical = data_op->result(0);
  if (storage_.count(logical)) return storage_.at(logical);
  builder_.SetInsertionPointAfter(data_op);
  // Same input name and attributes; only the declared shape and the type change.
  std::vector<std::pair<std::string, pir::Attribute>> attrs;
  for (const auto& [key, value] : data_op->attributes()) {
    if (key == "stop_gradient") continue;
    if (key == "shape") {
      std::vector<int64_t> shape = value.dyn_cast<paddle::dialect::IntArrayAttribute>().data().GetData();
      if (shape.size() == 4) std::swap(shape[0], shape[1]);
      attrs.emplace_back(key, paddle::dialect::IntArrayAttribute::get(pir::IrContext::Instance(), phi::IntArray(shape)));
    } else {
      attrs.emplace_back(key, value);
    }
  }
  const std::string name = data_op->attribute<pir::StrAttribute>("name").AsString();
  pir::Operation* data = build_op(builder_, "pd_op.data", {}, attrs, {storage_type(dense_type(logical))});
  created_.insert(data);
  doomed_.insert(data_op);
  inputs_.push_back(data_op);
  report_->storage_inputs.push_back(name);
  return storage_[logical] = data->result(0);
}

void KvCacheRewrite::convert_site(const Site& site) {
  pir::Value past_storage;
  uint32_t index = 0;
  if (is_op(site.past.defining_op(), "pd_op.data")) {
    past_storage = storage_of_input(site.past.defining_op());
  } else if (pir::Operation* loop = while_of_block_arg(site.past, &index)) {
    loop_vars_.insert({loop, index});
    past_storage = site.past;  // retyped to storage layout by convert_loop_var
  } else {
    past_storage = storage_.at(site.past);
  }
  const auto past_t = storage_type(dense_type(site.past));
  const auto& tok = dense_type(site.tokens).dims();
  std::vector<int64_t> dims = common::vectorize(past_t.dims());
  dims[0] = dims[0] < 0 || tok[1] < 0 ? -1 : dims[0] + tok[1];
  pir::IrContext* ctx = pir::IrContext::Instance();
  builder_.set_insertion_point(site.concat);
  pir::Operation* append = build_custom_op(
      builder_, names::kAppend, {past_storage, site.tokens},
      {{names::kMaxSeqLen, pir::Int64Attribute::get(ctx, attrs_.max_seq_len)},
       {names::kChunkBytes, pir::Int64Attribute::get(ctx, attrs_.chunk_bytes)}},
      {make_dense_type(past_t.dtype(), dims)});
  created_.insert(append);
  doomed_.insert(site.concat);
  doomed_.insert(site.concat->operand_source(0).defining_op());  // its builtin.combine
  storage_[site.concat->result(0)] = append->result(0);
  report_->appends++;
}

void KvCacheRewrite::convert_loop_var(const LoopVar& var) {
  auto [loop, i] = var;
  pir::Value arg = body_of(loop).arg(i);
  pir::Value result = loop->result(i);
  pir::Value init = loop->operand_source(i + 1);
  // The logical readers, taken before the types change (the appends made for this loop already
  // read the argument as storage).
  auto arg_uses = uses_of(arg);
  auto result_uses = uses_of(result);

  pir::Value init_storage;
  if (is_op(init.defining_op(), "pd_op.data")) {
    init_storage = storage_of_input(init.defining_op());
  } else if (storage_.count(init)) {
    init_storage = storage_.at(init);
  } else {
    // A cache computed before the loop (a prefill): one copy per run, not per step.
    pir::IrContext* ctx = pir::IrContext::Instance();
    builder_.set_insertion_point(loop);
    pir::Operation* migrate = build_custom_op(
        builder_, names::kFromDense, {init},
        {{names::kMaxSeqLen, pir::Int64Attribute::get(ctx, attrs_.max_seq_len)},
         {names::kChunkBytes, pir::Int64Attribute::get(ctx, attrs_.chunk_bytes)}},
        {storage_type(dense_type(init))});
    created_.insert(migrate);
    init_storage = migrate->result(0);
    report_->copies.push_back("the initial cache of while-loop variable " + std::to_string(i) +
                              " is computed before the loop: copied into a VTensor once per run "
                              "(vtensor_from_dense), not per step");
  }
  loop->operand(i + 1).set_source(init_storage);
  arg.set_type(storage_type(dense_type(arg)));
  result.set_type(storage_type(dense_type(result)));
  rewire(arg, arg_uses, arg);
  rewire(result, result_uses, result);
}

pir::Value KvCacheRewrite::logical_copy(pir::Value storage, const std::string& reader) {
  report_->copies.push_back(reader + " reads the cache in logical [B, S, H, D] layout: one transpose copy");
  if (logical_copies_.count(storage)) return logical_copies_.at(storage);
  if (pir::Operation* def = storage.defining_op()) {
    builder_.SetInsertionPointAfter(def);
  } else {
    builder_.SetInsertionPointToStart(storage.dyn_cast<pir::BlockArgument>().owner());
  }
  pir::Value t = build_transpose(builder_, storage, std::vector<int>(kStoragePerm, kStoragePerm + 4));
  created_.insert(t.defining_op());
  return logical_copies_[storage] = t;
}

void KvCacheRewrite::rewire(pir::Value logical,
                            const std::vector<std::pair<pir::Operation*, uint32_t>>& uses,
                            pir::Value storage) {
  for (const auto& [owner, index] : uses) {
    if (doomed_.count(owner)) continue;
    // A loop variable is retyped in place (logical == storage): the appends made for it read it as
    // storage. Any other use by an op the pass made reads the logical value (new tokens that are
    // themselves a cache input) and is rewired like any reader.
    if (created_.count(owner) && logical == storage) continue;
    const std::vector<int> perm = transpose_perm(owner);
    if (perm.size() == 4) {
      // transpose(logical, p) == transpose(storage, storage_perm o p): same single copy as before.
      std::vector<int> q(4);
      for (int j = 0; j < 4; ++j) q[j] = kStoragePerm[perm[j]];
      pir::Value replacement = storage;
      if (q != kIdentity4) {
        builder_.set_insertion_point(owner);
        replacement = build_transpose(builder_, storage, q);
        created_.insert(replacement.defining_op());
        report_->copies.push_back(describe(owner) + " of the cache is kept (it reads the storage layout "
                                  "directly): a copy, as before the pass");
      }
      owner->result(0).ReplaceAllUsesWith(replacement);
      doomed_.insert(owner);
    } else if (is_op(owner, "pd_op.shape64") || is_op(owner, "pd_op.shape")) {
      builder_.set_insertion_point(owner);
      pir::Value shape = build_logical_shape(builder_, storage, is_op(owner, "pd_op.shape64"));
      // The gather and the three ops feeding it are the pass's own.
      created_.insert(shape.defining_op());
      for (uint32_t i = 0; i < 3; ++i) created_.insert(shape.defining_op()->operand_source(i).defining_op());
      owner->result(0).ReplaceAllUsesWith(shape);
      doomed_.insert(owner);
    } else if (is_op(owner, "pd_op.fetch") || is_op(owner, "builtin.shadow_output")) {
      owner->operand(index).set_source(storage);
      if (owner->num_results() > 0) owner->result(0).set_type(storage.type());
      report_->storage_outputs.push_back(describe(owner));
    } else if (is_op(owner, "pd_op.assign")) {
      // A whole-cache copy that only decouples buffers: appends never write memory a live tensor
      // sees (the core copies on write), so the copy can go.
      rewire(owner->result(0), uses_of(owner->result(0)), storage);
      doomed_.insert(owner);
      report_->assigns_removed++;
    } else if (is_op(owner, "cf.yield") && index > 0 && loop_vars_.count({owner->GetParentOp(), index - 1})) {
      owner->operand(index).set_source(storage);
    } else if (is_op(owner, "pd_op.while") && index > 0 && loop_vars_.count({owner, index - 1})) {
      owner->operand(index).set_source(storage);
    } else {
      owner->operand(index).set_source(logical_copy(storage, describe(owner)));
    }
  }
}

void KvCacheRewrite::erase_dead() {
  // Pure ops whose results nobody reads any more (what the removed chains used) go too.
  static const std::set<std::string> kPure = {"pd_op.full", "pd_op.full_int_array", "builtin.combine",
                                              "pd_op.transpose", "pd_op.scale", "pd_op.cast",
                                              "pd_op.reshape", "pd_op.shape64", "pd_op.shape"};
  auto unused = [](pir::Operation* op) {
    for (uint32_t i = 0; i < op->num_results(); ++i) {
      if (!op->result(i).use_empty()) return false;
    }
    return true;
  };
  std::vector<pir::Operation*> work(doomed_.begin(), doomed_.end());
  std::set<pir::Operation*> erased;
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t w = 0; w < work.size(); ++w) {  // by index: the loop appends to `work`
      pir::Operation* op = work[w];
      if (op == nullptr || !unused(op)) continue;
      std::vector<pir::Operation*> inputs;
      for (uint32_t i = 0; i < op->num_operands(); ++i) {
        if (pir::Value v = op->operand_source(i)) {
          if (pir::Operation* def = v.defining_op()) inputs.push_back(def);
        }
      }
      erased.insert(op);
      op->Erase();
      work[w] = nullptr;
      progress = true;
      for (pir::Operation* def : inputs) {
        if (!erased.count(def) && kPure.count(def->name()) &&
            std::find(work.begin(), work.end(), def) == work.end()) {
          work.push_back(def);
        }
      }
    }
  }
  for (pir::Operation* op : work) {
    if (op != nullptr && doomed_.count(op)) {
      report_->copies.push_back("internal: " + describe(op) + " still has readers after the rewrite");
    }
  }
}

void KvCacheRewrite::Run() {
  collect(top_);
  if (!analyze()) return;
  for (const Site& site : sites_) convert_site(site);
  // Attention before the generic readers, so its transposes of K and V are matched, not rewired.
  if (custom_op_registered(names::kDecodeAttention)) {
    for (const Site& site : sites_) {
      report_->attentions += rewrite_attention(site.concat->result(0), storage_, builder_, &created_, &doomed_);
    }
  }
  for (const LoopVar& var : loop_vars_) convert_loop_var(var);
  for (pir::Operation* data_op : inputs_) {
    pir::Value logical = data_op->result(0);
    rewire(logical, uses_of(logical), storage_.at(logical));
  }
  for (const Site& site : sites_) {
    pir::Value logical = site.concat->result(0);
    rewire(logical, uses_of(logical), storage_.at(logical));
  }
  erase_dead();
}

}  // namespace pvt
