#include "ir_helpers.h"

#include "paddle/common/enforce.h"
#include "paddle/fluid/pir/dialect/operator/ir/op_attribute.h"
#include "paddle/pir/include/core/builtin_attribute.h"
#include "paddle/pir/include/core/builtin_type.h"
#include "paddle/pir/include/core/ir_context.h"

namespace pvt {
namespace {

bool scalar_attr(pir::Attribute a, double* out) {
  if (!a) return false;
  if (auto f = a.dyn_cast<pir::FloatAttribute>()) return *out = f.data(), true;
  if (auto d = a.dyn_cast<pir::DoubleAttribute>()) return *out = d.data(), true;
  if (auto i = a.dyn_cast<pir::Int32Attribute>()) return *out = i.data(), true;
  if (auto l = a.dyn_cast<pir::Int64Attribute>()) return *out = static_cast<double>(l.data()), true;
  if (auto arr = a.dyn_cast<pir::ArrayAttribute>()) {
    return arr.size() == 1 && scalar_attr(arr.at(0), out);
  }
  return false;
}

}  // namespace

bool is_op(const pir::Operation* op, const char* name) { return op != nullptr && op->name() == name; }

bool defined_by(pir::Value v, const char* name) { return v && is_op(v.defining_op(), name); }

bool constant_scalar(pir::Value v, double* out) {
  if (!v) return false;
  pir::Operation* op = v.defining_op();
  if (!is_op(op, "pd_op.full") && !is_op(op, "pd_op.full_int_array")) return false;
  if (!op->HasAttribute("value")) return false;
  return scalar_attr(op->attribute("value"), out);
}

std::vector<int> transpose_perm(const pir::Operation* op) {
  std::vector<int> perm;
  if (!is_op(op, "pd_op.transpose") || !op->HasAttribute("perm")) return perm;
  auto arr = op->attribute("perm").dyn_cast<pir::ArrayAttribute>();
  if (!arr) return perm;
  for (size_t i = 0; i < arr.size(); ++i) {
    double v = 0;
    if (!scalar_attr(arr.at(i), &v)) return {};
    perm.push_back(static_cast<int>(v));
  }
  return perm;
}

bool is_transpose(const pir::Operation* op, const std::vector<int>& perm) {
  return is_op(op, "pd_op.transpose") && transpose_perm(op) == perm;
}

pir::DenseTensorType dense_type(pir::Value v) {
  if (!v || !v.type()) return pir::DenseTensorType();
  return v.type().dyn_cast<pir::DenseTensorType>();
}

bool is_kv_dtype(pir::Type dtype) {
  return dtype.isa<pir::Float32Type>() || dtype.isa<pir::Float16Type>() || dtype.isa<pir::BFloat16Type>();
}

int rank_of(pir::Value v) {
  auto t = dense_type(v);
  return t ? static_cast<int>(t.dims().size()) : -1;
}

pir::DenseTensorType make_dense_type(pir::Type dtype, const std::vector<int64_t>& dims) {
  return pir::DenseTensorType::get(pir::IrContext::Instance(), dtype, common::make_ddim(dims),
                                   common::DataLayout::NCHW, pir::LegacyLoD(), 0);
}

pir::DenseTensorType storage_type(pir::DenseTensorType logical) {
  const auto& d = logical.dims();
  PADDLE_ENFORCE_EQ(d.size(), 4, common::errors::InvalidArgument("vtensor pass: expected a rank-4 cache"));
  std::vector<int64_t> dims(4);
  for (int i = 0; i < 4; ++i) dims[i] = d[kStoragePerm[i]];
  return pir::DenseTensorType::get(pir::IrContext::Instance(), logical.dtype(), common::make_ddim(dims),
                                   logical.data_layout(), logical.lod(), logical.offset());
}

std::vector<std::pair<pir::Operation*, uint32_t>> uses_of(pir::Value v) {
  std::vector<std::pair<pir::Operation*, uint32_t>> uses;
  for (auto it = v.use_begin(); it != v.use_end(); ++it) uses.emplace_back(it->owner(), it->index());
  return uses;
}

std::string describe(const pir::Operation* op) {
  if (op == nullptr) return "(none)";
  std::string s = op->name();
  for (const char* key : {"name", "output_name"}) {
    if (op->HasAttribute(key)) {
      if (auto str = op->attribute(key).dyn_cast<pir::StrAttribute>()) return s + " '" + str.AsString() + "'";
    }
  }
  return s;
}

bool custom_op_registered(const std::string& name) {
  return static_cast<bool>(pir::IrContext::Instance()->GetRegisteredOpInfo("custom_op." + name));
}

pir::Operation* build_op(pir::Builder& builder, const std::string& name, const std::vector<pir::Value>& operands,
                         const std::vector<std::pair<std::string, pir::Attribute>>& attrs,
                         const std::vector<pir::Type>& result_types) {
  pir::IrContext* ctx = pir::IrContext::Instance();
  pir::OpInfo info = ctx->GetRegisteredOpInfo(name);
  PADDLE_ENFORCE_EQ(static_cast<bool>(info), true,
                    common::errors::NotFound("vtensor pass: %s is not registered; load paddle_vtensor's "
                                             "ops before running the pass",
                                             name));
  pir::OperationArgument argument(info);
  argument.AddInputs(operands);
  for (const auto& [key, value] : attrs) argument.AddAttribute(key, value);
  argument.AddOutputs(result_types.begin(), result_types.end());
  // Inference only: no gradients flow through what the pass builds.
  std::vector<pir::Attribute> stop(result_types.size(), pir::BoolAttribute::get(ctx, true));
  argument.AddAttribute("stop_gradient", pir::ArrayAttribute::get(ctx, stop));
  return builder.Build(std::move(argument));
}

pir::Operation* build_custom_op(pir::Builder& builder, const std::string& name,
                                const std::vector<pir::Value>& operands,
                                const std::vector<std::pair<std::string, pir::Attribute>>& attrs,
                                const std::vector<pir::Type>& result_types) {
  return build_op(builder, "custom_op." + name, operands, attrs, result_types);
}

pir::Value build_transpose(pir::Builder& builder, pir::Value x, const std::vector<int>& perm) {
  pir::IrContext* ctx = pir::IrContext::Instance();
  auto t = dense_type(x);
  std::vector<int64_t> dims(perm.size());
  std::vector<pir::Attribute> perm_attr;
  for (size_t i = 0; i < perm.size(); ++i) {
    dims[i] = t.dims()[perm[i]];
    perm_attr.push_back(pir::Int32Attribute::get(ctx, perm[i]));
  }
  return build_op(builder, "pd_op.transpose", {x}, {{"perm", pir::ArrayAttribute::get(ctx, perm_attr)}},
                  {make_dense_type(t.dtype(), dims)})
      ->result(0);
}

pir::Value build_logical_shape(pir::Builder& builder, pir::Value storage, bool int64) {
  pir::IrContext* ctx = pir::IrContext::Instance();
  const pir::Type ir_dtype = int64 ? pir::Type(pir::Int64Type::get(ctx)) : pir::Type(pir::Int32Type::get(ctx));
  auto place = paddle::dialect::PlaceAttribute::get(ctx, phi::CPUPlace());
  pir::Value shape = build_op(builder, int64 ? "pd_op.shape64" : "pd_op.shape", {storage}, {},
                              {make_dense_type(ir_dtype, {4})})
                         ->result(0);
  std::vector<pir::Attribute> order;
  for (int i : kStoragePerm) order.push_back(pir::Int64Attribute::get(ctx, i));
  pir::Value index = build_op(builder, "pd_op.full_int_array", {},
                              {{"value", pir::ArrayAttribute::get(ctx, order)},
                               {"dtype", paddle::dialect::DataTypeAttribute::get(ctx, phi::DataType::INT64)},
                               {"place", place}},
                              {make_dense_type(pir::Int64Type::get(ctx), {4})})
                         ->result(0);
  pir::Value axis = build_op(builder, "pd_op.full", {},
                             {{"shape", paddle::dialect::IntArrayAttribute::get(ctx, phi::IntArray(std::vector<int64_t>{1}))},
                              {"value", pir::DoubleAttribute::get(ctx, 0.0)},
                              {"dtype", paddle::dialect::DataTypeAttribute::get(ctx, phi::DataType::INT32)},
                              {"place", place}},
                             {make_dense_type(pir::Int32Type::get(ctx), {1})})
                        ->result(0);
  return build_op(builder, "pd_op.gather", {shape, index, axis}, {}, {make_dense_type(ir_dtype, {4})})->result(0);
}

}  // namespace pvt
