#include "attention_rewrite.h"

#include <vector>

#include "paddle/fluid/pir/dialect/operator/ir/op_attribute.h"
#include "paddle/pir/include/core/builtin_attribute.h"
#include "paddle/pir/include/core/builtin_type.h"
#include "paddle/pir/include/core/ir_context.h"

#include "../custom_ops/op_names.h"
#include "ir_helpers.h"

namespace pvt {
namespace {

const std::vector<int> kHeadsFirst = {0, 2, 1, 3};  // [B, S, H, D] <-> [B, H, S, D]
const std::vector<int> kLastTwo = {0, 1, 3, 2};

bool bool_attr(const pir::Operation* op, const char* key) {
  if (!op->HasAttribute(key)) return false;
  auto b = op->attribute(key).dyn_cast<pir::BoolAttribute>();
  return b && b.data();
}

// The only reader of `v`, or nullptr.
pir::Operation* sole_reader(pir::Value v, uint32_t* index = nullptr) {
  if (!v || !v.HasOneUse()) return nullptr;
  auto use = v.use_begin();
  if (index != nullptr) *index = use->index();
  return use->owner();
}

bool is_shape(const pir::Operation* op) { return is_op(op, "pd_op.shape64") || is_op(op, "pd_op.shape"); }

// The only reader of `v` other than shape/shape64 ops (those go into `shapes`), or nullptr.
pir::Operation* sole_reader_but_shapes(pir::Value v, std::vector<pir::Operation*>* shapes) {
  pir::Operation* found = nullptr;
  for (const auto& [owner, index] : uses_of(v)) {
    if (is_shape(owner)) {
      shapes->push_back(owner);
    } else if (found != nullptr) {
      return nullptr;
    } else {
      found = owner;
    }
  }
  return found;
}

// A shape/shape64 of repeat_kv's result, [B, S, Hkv * n, D], once the chain is gone: the same op on
// the cache itself (rewired later to the storage like any shape reader), times [1, 1, n, 1].
// With dynamic lengths (a whole generation loop) llama reads `value_states.shape` after repeat_kv.
void replace_repeated_shape(pir::Builder& builder, pir::Operation* shape, pir::Value cache, int64_t n,
                            std::set<pir::Operation*>* doomed) {
  pir::IrContext* ctx = pir::IrContext::Instance();
  const bool int64 = is_op(shape, "pd_op.shape64");
  const pir::Type type = shape->result(0).type();
  builder.set_insertion_point(shape);
  pir::Value own = build_op(builder, shape->name(), {cache}, {}, {type})->result(0);
  std::vector<pir::Attribute> factor;
  for (int64_t f : {int64_t{1}, int64_t{1}, n, int64_t{1}}) factor.push_back(pir::Int64Attribute::get(ctx, f));
  const phi::DataType dtype = int64 ? phi::DataType::INT64 : phi::DataType::INT32;
  pir::Value times = build_op(builder, "pd_op.full_int_array", {},
                              {{"value", pir::ArrayAttribute::get(ctx, factor)},
                               {"dtype", paddle::dialect::DataTypeAttribute::get(ctx, dtype)},
                               {"place", paddle::dialect::PlaceAttribute::get(ctx, phi::CPUPlace())}},
                              {type})
                         ->result(0);
  pir::Value scaled = build_op(builder, "pd_op.multiply", {own, times}, {}, {type})->result(0);
  shape->result(0).ReplaceAllUsesWith(scaled);
  doomed->insert(shape);
}

// Walks back from `v` over single-use casts, collecting them.
pir::Value skip_casts(pir::Value v, std::vector<pir::Operation*>* chain) {
  while (defined_by(v, "pd_op.cast") && v.HasOneUse()) {
    chain->push_back(v.defining_op());
    v = v.defining_op()->operand_source(0);
  }
  return v;
}

// llama's repeat_kv for grouped-query attention, as to_static records it:
//   reshape(tile(unsqueeze(x, -2), [1, 1, 1, n, 1]), [B, S, Hkv * n, D])
// Query head h then reads kv head h / n, which is how vtensor_decode_attention groups heads, so the
// chain can go. Checked on the static types, not on how each op spells its arguments. Returns the
// reshape's result, or a null value when `unsqueeze` does not start such a chain.
pir::Value repeat_kv_result(pir::Operation* unsqueeze, std::vector<pir::Operation*>* chain) {
  if (!is_op(unsqueeze, "pd_op.unsqueeze")) return pir::Value();
  pir::Operation* tile = sole_reader(unsqueeze->result(0));
  if (!is_op(tile, "pd_op.tile")) return pir::Value();
  pir::Operation* reshape = sole_reader(tile->result(0));
  if (!is_op(reshape, "pd_op.reshape")) return pir::Value();
  auto x = dense_type(unsqueeze->operand_source(0));
  auto u = dense_type(unsqueeze->result(0));
  auto t = dense_type(tile->result(0));
  auto r = dense_type(reshape->result(0));
  if (!x || !u || !t || !r || x.dims().size() != 4 || u.dims().size() != 5 || t.dims().size() != 5 ||
      r.dims().size() != 4) {
    return pir::Value();
  }
  const auto &xd = x.dims(), &ud = u.dims(), &td = t.dims(), &rd = r.dims();
  const int64_t n = td[3];
  const bool unsqueezed = ud[0] == xd[0] && ud[1] == xd[1] && ud[2] == xd[2] && ud[3] == 1 && ud[4] == xd[3];
  const bool tiled = td[0] == ud[0] && td[1] == ud[1] && td[2] == ud[2] && n >= 1 && td[4] == ud[4];
  const bool merged = rd[0] == xd[0] && rd[1] == xd[1] && xd[2] > 0 && rd[2] == xd[2] * n && rd[3] == xd[3];
  if (!unsqueezed || !tiled || !merged) return pir::Value();
  chain->insert(chain->end(), {unsqueeze, tile, reshape});
  return reshape->result(0);
}

struct RepeatedShape {
  pir::Operation* shape;
  pir::Value cache;
  int64_t n;
};

// The cache a [B, S, H, D] attention operand comes from: itself, or the input of a repeat_kv
// (whose result may also be read by shape ops: they go into `shapes`).
pir::Value cache_behind(pir::Value x, std::vector<pir::Operation*>* chain, std::vector<RepeatedShape>* shapes) {
  pir::Operation* reshape = x.defining_op();
  std::vector<pir::Operation*> shape_readers;
  if (!is_op(reshape, "pd_op.reshape") || sole_reader_but_shapes(x, &shape_readers) == nullptr) return x;
  pir::Operation* tile = reshape->operand_source(0).defining_op();
  pir::Operation* unsqueeze = is_op(tile, "pd_op.tile") ? tile->operand_source(0).defining_op() : nullptr;
  std::vector<pir::Operation*> found;
  if (repeat_kv_result(unsqueeze, &found) != x) return x;
  chain->insert(chain->end(), found.begin(), found.end());
  const int64_t n = dense_type(tile->result(0)).dims()[3];
  for (pir::Operation* op : shape_readers) shapes->push_back({op, unsqueeze->operand_source(0), n});
  return unsqueeze->operand_source(0);
}

struct Match {
  pir::Value q, k_logical, mask;
  double scale = 1.0;
  pir::Operation* out = nullptr;    // the final transpose, replaced
  std::vector<pir::Operation*> ops;  // everything between the caches and `out`, removed
  std::vector<RepeatedShape> shapes;  // shape readers of a removed repeat_kv result, rebuilt
};

// w = matmul(qs, transpose(kt)) or matmul(qs, kt, transpose_y); kt = transpose(K); qs = scale(qt).
bool match_scores(pir::Value w, Match* m) {
  pir::Operation* qk = w.defining_op();
  if (!is_op(qk, "pd_op.matmul") || !w.HasOneUse() || bool_attr(qk, "transpose_x")) return false;
  pir::Value kt = qk->operand_source(1);
  if (!bool_attr(qk, "transpose_y")) {
    pir::Operation* swap = kt.defining_op();
    if (!is_transpose(swap, kLastTwo) || !kt.HasOneUse()) return false;
    m->ops.push_back(swap);
    kt = swap->operand_source(0);
  }
  pir::Operation* heads = kt.defining_op();
  if (!is_transpose(heads, kHeadsFirst) || !kt.HasOneUse()) return false;
  m->ops.push_back(heads);
  m->ops.push_back(qk);
  m->k_logical = cache_behind(heads->operand_source(0), &m->ops, &m->shapes);

  pir::Value qs = qk->operand_source(0);
  pir::Operation* scale = qs.defining_op();
  if (is_op(scale, "pd_op.scale")) {
    // scale(x, s) with bias 0; PIR's scale takes s as a constant operand.
    auto bias = scale->attribute("bias").dyn_cast<pir::FloatAttribute>();
    if (!bias || bias.data() != 0.0f) return false;
    if (scale->num_operands() < 2 || !constant_scalar(scale->operand_source(1), &m->scale)) return false;
    qs = scale->operand_source(0);
  }
  pir::Operation* q_heads = qs.defining_op();
  if (!is_transpose(q_heads, kHeadsFirst)) return false;
  m->q = q_heads->operand_source(0);
  return true;
}

bool match_from_v(pir::Operation* vt, Match* m) {
  uint32_t slot = 0;
  pir::Operation* pv = sole_reader(vt->result(0), &slot);
  if (!is_op(pv, "pd_op.matmul") || slot != 1 || bool_attr(pv, "transpose_x") || bool_attr(pv, "transpose_y")) {
    return false;
  }
  pir::Operation* out = sole_reader(pv->result(0));
  if (!is_transpose(out, kHeadsFirst)) return false;
  m->out = out;
  m->ops = {vt, pv};

  pir::Value p = skip_casts(pv->operand_source(0), &m->ops);
  pir::Operation* softmax = p.defining_op();
  if (!is_op(softmax, "pd_op.softmax") || !p.HasOneUse()) return false;
  auto a = softmax->attribute("axis").dyn_cast<pir::Int32Attribute>();
  if (!a || (a.data() != -1 && a.data() != 3)) return false;
  m->ops.push_back(softmax);

  pir::Value w = skip_casts(softmax->operand_source(0), &m->ops);
  pir::Operation* add = w.defining_op();
  if (is_op(add, "pd_op.add") && w.HasOneUse()) {
    for (int side = 0; side < 2; ++side) {
      Match trial = *m;
      trial.ops.push_back(add);
      if (match_scores(add->operand_source(side), &trial)) {
        trial.mask = add->operand_source(1 - side);
        *m = trial;
        return rank_of(m->mask) == 4;
      }
    }
    return false;
  }
  return match_scores(w, m);
}

bool shapes_fit(const Match& m, pir::Value k_storage, pir::Value v_storage) {
  auto q = dense_type(m.q);
  auto out = dense_type(m.out->result(0));
  if (!q || !out || q.dims().size() != 4 || q.dims() != out.dims() || q.dtype() != out.dtype()) return false;
  if (!is_kv_dtype(q.dtype()) || dense_type(k_storage).dtype() != q.dtype()) return false;
  if (dense_type(k_storage).dims() != dense_type(v_storage).dims()) return false;
  const int64_t q_heads = q.dims()[2], kv_heads = dense_type(k_storage).dims()[2];
  if (q_heads <= 0 || kv_heads <= 0 || q_heads % kv_heads != 0) return false;
  if (m.mask) {
    auto mask = dense_type(m.mask);
    const int64_t S = dense_type(k_storage).dims()[0], last = mask.dims()[3];
    if (S >= 0 && last >= 0 && S != last) return false;
  }
  return true;
}

}  // namespace

int rewrite_attention(pir::Value v_logical, const std::unordered_map<pir::Value, pir::Value>& storage,
                      pir::Builder& builder, std::set<pir::Operation*>* created,
                      std::set<pir::Operation*>* doomed) {
  int rewritten = 0;
  for (const auto& [reader, index] : uses_of(v_logical)) {
    if (doomed->count(reader)) continue;
    Match m;
    pir::Operation* vt = reader;
    std::vector<pir::Operation*> repeat, v_shapes;
    if (pir::Value repeated = repeat_kv_result(reader, &repeat)) {
      vt = sole_reader_but_shapes(repeated, &v_shapes);
      for (pir::Operation* op : v_shapes) {
        m.shapes.push_back({op, v_logical, dense_type(repeat[1]->result(0)).dims()[3]});
      }
    }
    if (!is_transpose(vt, kHeadsFirst) || !match_from_v(vt, &m) || !storage.count(m.k_logical)) continue;
    m.ops.insert(m.ops.end(), repeat.begin(), repeat.end());
    pir::Value k_storage = storage.at(m.k_logical), v_storage = storage.at(v_logical);
    if (!shapes_fit(m, k_storage, v_storage)) continue;
    builder.set_insertion_point(m.out);
    pir::Operation* attention = build_custom_op(
        builder, names::kDecodeAttention, {m.q, k_storage, v_storage, m.mask},
        {{names::kScale, pir::FloatAttribute::get(pir::IrContext::Instance(), static_cast<float>(m.scale))}},
        {m.out->result(0).type()});
    created->insert(attention);
    m.out->result(0).ReplaceAllUsesWith(attention->result(0));
    doomed->insert(m.out);
    for (const RepeatedShape& r : m.shapes) replace_repeated_shape(builder, r.shape, r.cache, r.n, doomed);
    for (pir::Operation* op : m.ops) doomed->insert(op);
    ++rewritten;
  }
  return rewritten;
}

}  // namespace pvt
