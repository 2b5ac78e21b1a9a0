// Small reads and builds on PIR that the KV-cache rewrite needs: constants, permutations, tensor
// types, uses, and the plugin's custom ops. Nothing here decides what to rewrite.
#pragma once

#include <string>
#include <vector>

#include "paddle/fluid/pir/dialect/operator/ir/op_type.h"
#include "paddle/pir/include/core/builder.h"
#include "paddle/pir/include/core/operation.h"
#include "paddle/pir/include/core/value.h"

namespace pvt {

// Logical [B, S, H, D] <-> storage [S, B, H, D]: the permutation is its own inverse.
constexpr int kStoragePerm[4] = {1, 0, 2, 3};

bool is_op(const pir::Operation* op, const char* name);
bool defined_by(pir::Value v, const char* name);

// The value of a scalar constant (pd_op.full, or a one-element pd_op.full_int_array); false if `v`
// is not one.
bool constant_scalar(pir::Value v, double* out);
// The `perm` attribute of a pd_op.transpose.
std::vector<int> transpose_perm(const pir::Operation* op);
bool is_transpose(const pir::Operation* op, const std::vector<int>& perm);

// `v` as a dense tensor type (a null type if it is not one).
pir::DenseTensorType dense_type(pir::Value v);
bool is_kv_dtype(pir::Type dtype);  // float32, float16, bfloat16
int rank_of(pir::Value v);          // -1 when `v` is not a dense tensor
// The type with its dims permuted by kStoragePerm.
pir::DenseTensorType storage_type(pir::DenseTensorType logical);
pir::DenseTensorType make_dense_type(pir::Type dtype, const std::vector<int64_t>& dims);

// The (op, operand index) pairs that use `v` now, copied, so the caller may rewire while walking.
std::vector<std::pair<pir::Operation*, uint32_t>> uses_of(pir::Value v);
std::string describe(const pir::Operation* op);  // "pd_op.matmul" plus a name attribute if any

// Builds the registered op `name` ("pd_op.transpose", "custom_op.vtensor_append") from operands,
// attributes and result types, marking its results stop_gradient like Paddle's static API does.
// The pass builds Paddle's own ops this way too: pd_op.h needs headers (glog) that Paddle's wheel
// does not ship. Throws if `name` is not registered.
pir::Operation* build_op(pir::Builder& builder, const std::string& name, const std::vector<pir::Value>& operands,
                         const std::vector<std::pair<std::string, pir::Attribute>>& attrs,
                         const std::vector<pir::Type>& result_types);
// build_op("custom_op." + name, ...): the extension's own ops.
pir::Operation* build_custom_op(pir::Builder& builder, const std::string& name,
                                const std::vector<pir::Value>& operands,
                                const std::vector<std::pair<std::string, pir::Attribute>>& attrs,
                                const std::vector<pir::Type>& result_types);
bool custom_op_registered(const std::string& name);

// pd_op.transpose(x, perm), its result type permuted from x's.
pir::Value build_transpose(pir::Builder& builder, pir::Value x, const std::vector<int>& perm);
// The shape of the logical [B, S, H, D] cache from its storage view: gather(shape(storage), [1,0,2,3]),
// as pd_op.shape64 (int64) or pd_op.shape (int32).
pir::Value build_logical_shape(pir::Builder& builder, pir::Value storage, bool int64);

}  // namespace pvt
