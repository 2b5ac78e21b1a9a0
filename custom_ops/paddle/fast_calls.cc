// Direct calls from Python into the ops' own functions, for eager VTensor inputs: the host-cost fast
// path of paddle_vtensor/api.py (issue 13; docs/PERFORMANCE.md "Host cost per call").
//
// Paddle's custom-op dispatch (_C_ops._run_custom_op) costs about as much as a whole paddle.concat,
// and makes every non-contiguous input contiguous, so the ops take the cache as its storage view
// [S, B, H, D] and Python had to transpose on the way in and out. These entry points are plain
// CPython functions (METH_FASTCALL, GIL held, as a custom op runs in eager mode) that take the
// logical [B, S, H, D] VTensor as it is, find its storage view without a copy, call the very
// function the op runs (same checks, same errors), and return the logical result.
//
// Each returns None when it cannot take the call (an argument that is not a whole VTensor view, a
// non-contiguous token, not a tensor): Python then calls the op the ordinary way, which migrates a
// plain cache or raises the typed error. An op's refusal raises OSError with the op's message, as
// the op itself would. A slot cache (or a view of one) is refused here with the op's message rather
// than declined: the ordinary way would first transpose or copy it whole, reading unmapped memory.
// Static graphs never come here: they use the ops (and the pass).
#include <Python.h>

#include "append_common.h"

// From paddle/utils/pybind.h (exported by libpaddle; not included because it pulls pybind11 and
// ATen headers into every build of this file).
namespace paddle {
namespace pybind {
bool PyCheckTensor(PyObject* obj);
paddle::Tensor& CastPyArg2Tensor(PyObject* obj, Py_ssize_t arg_pos);
PyObject* ToPyObject(const paddle::Tensor& value, bool return_py_none_if_not_initialize);
}  // namespace pybind
}  // namespace paddle

// The ops' functions (one per op file).
std::vector<paddle::Tensor> VTensorTruncate(const paddle::Tensor& cache, int64_t seq_len);
std::vector<paddle::Tensor> VTensorDecodeAttention(const paddle::Tensor& q, const paddle::Tensor& k,
                                                   const paddle::Tensor& v,
                                                   const paddle::optional<paddle::Tensor>& mask,
                                                   float scale);

namespace {

using paddle::pybind::CastPyArg2Tensor;
using paddle::pybind::PyCheckTensor;

// The storage view [S, B, H, D] of `t` when `t` is a whole logical VTensor view ([B, S, H, D] at
// offset 0 with the seq-major strides {H*D, B*H*D, D, 1}), else an undefined tensor.
paddle::Tensor storage_of(const paddle::Tensor& t) {
  auto dense = std::dynamic_pointer_cast<phi::DenseTensor>(t.impl());
  if (!dense || !dense->initialized() || dense->meta().offset != 0) return {};
  if (dynamic_cast<const pvt::VTensorAllocation*>(dense->Holder().get()) == nullptr) return {};
  const auto& d = dense->dims();
  if (d.size() != 4) return {};
  const auto& st = dense->strides();
  const int64_t B = d[0], S = d[1], H = d[2], D = d[3];
  if (st.size() != 4 || st[0] != H * D || st[1] != B * H * D || st[2] != D || st[3] != 1) return {};
  phi::DenseTensorMeta meta(dense->dtype(), phi::make_ddim({S, B, H, D}));
  paddle::Tensor storage(std::make_shared<phi::DenseTensor>(dense->Holder(), meta));
  return pvt::whole_storage_view(storage) != nullptr ? storage : paddle::Tensor();
}

// The logical view [B, S, H, D] of a storage view [S, B, H, D]: what transpose(storage, [1, 0, 2, 3])
// gives, without an op.
paddle::Tensor logical_of(const paddle::Tensor& storage) {
  auto dense = std::static_pointer_cast<phi::DenseTensor>(storage.impl());
  const auto& d = dense->dims();
  phi::DenseTensorMeta meta(dense->dtype(), phi::make_ddim({d[1], d[0], d[2], d[3]}),
                            phi::make_ddim({d[2] * d[3], d[1] * d[2] * d[3], d[3], 1}));
  return paddle::Tensor(std::make_shared<phi::DenseTensor>(dense->Holder(), meta));
}

PyObject* none() { Py_RETURN_NONE; }

// Refuses (throws, naming `op`) when the tensor argument args[i] lies in a slot cache.
void refuse_slot_arg(PyObject* const* args, Py_ssize_t i, const char* op, const char* what) {
  pvt::refuse_slot_cache(CastPyArg2Tensor(args[i], i), op, what);
}

PyObject* to_python(const paddle::Tensor& t) { return paddle::pybind::ToPyObject(t, false); }

// Runs `body` (which returns a new reference), turning a C++ exception into OSError with its text,
// the way Paddle surfaces an op's PD_THROW.
template <typename Body>
PyObject* guarded(Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_OSError, e.what());
    return nullptr;
  }
}

bool read_int(PyObject* o, int64_t* out) {
  if (!PyLong_CheckExact(o)) return false;  // Python passes ints it has checked
  *out = PyLong_AsLongLong(o);
  if (*out == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// append(cache, tokens, max_seq_len, chunk_bytes, expect_tokens) -> logical result or None
PyObject* fast_append(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  int64_t m, c, expect;
  if (nargs != 5 || !PyCheckTensor(args[0]) || !PyCheckTensor(args[1]) || !read_int(args[2], &m) ||
      !read_int(args[3], &c) || !read_int(args[4], &expect)) {
    return none();
  }
  return guarded([&]() -> PyObject* {
    const paddle::Tensor storage = storage_of(CastPyArg2Tensor(args[0], 0));
    const paddle::Tensor& tokens = CastPyArg2Tensor(args[1], 1);
    if (!storage.defined()) {
      const char* op = expect == 1 ? pvt::names::kReserveOneToken : pvt::names::kAppend;
      refuse_slot_arg(args, 0, op, "the cache");
      refuse_slot_arg(args, 1, op, "tokens");
    }
    // append_to_cache reads tokens as contiguous [B, T, H, D] (the op runner guarantees that).
    if (!storage.defined() || !tokens.defined() || !tokens.is_dense_tensor() ||
        !std::static_pointer_cast<phi::DenseTensor>(tokens.impl())->meta().is_contiguous()) {
      return none();
    }
    const char* op = expect == 1 ? pvt::names::kReserveOneToken : pvt::names::kAppend;
    return to_python(logical_of(pvt::append_to_cache(storage, tokens, m, c, expect, op)));
  });
}

// truncate(cache, seq_len) -> logical view or None
PyObject* fast_truncate(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  int64_t n;
  if (nargs != 2 || !PyCheckTensor(args[0]) || !read_int(args[1], &n)) return none();
  return guarded([&]() -> PyObject* {
    const paddle::Tensor storage = storage_of(CastPyArg2Tensor(args[0], 0));
    if (!storage.defined()) {
      refuse_slot_arg(args, 0, pvt::names::kTruncate, "the cache");
      return none();
    }
    return to_python(logical_of(VTensorTruncate(storage, n)[0]));
  });
}

// storage(x) -> the storage view of a whole VTensor view, or None
PyObject* fast_storage(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1 || !PyCheckTensor(args[0])) return none();
  return guarded([&]() -> PyObject* {
    const paddle::Tensor storage = storage_of(CastPyArg2Tensor(args[0], 0));
    if (!storage.defined()) refuse_slot_arg(args, 0, "storage_view", "the cache");
    return storage.defined() ? to_python(storage) : none();
  });
}

// is_view(x) -> True when x is a whole VTensor view
PyObject* fast_is_view(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1 || !PyCheckTensor(args[0])) Py_RETURN_FALSE;
  return guarded([&]() -> PyObject* {
    return PyBool_FromLong(storage_of(CastPyArg2Tensor(args[0], 0)).defined() ? 1 : 0);
  });
}

// decode_attention(q, k_cache, v_cache, mask or None, scale) -> out or None
PyObject* fast_decode_attention(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5 || !PyCheckTensor(args[0]) || !PyCheckTensor(args[1]) || !PyCheckTensor(args[2]) ||
      (args[3] != Py_None && !PyCheckTensor(args[3])) || !PyFloat_CheckExact(args[4])) {
    return none();
  }
  const double scale = PyFloat_AsDouble(args[4]);
  return guarded([&]() -> PyObject* {
    const paddle::Tensor k = storage_of(CastPyArg2Tensor(args[1], 1));
    const paddle::Tensor v = storage_of(CastPyArg2Tensor(args[2], 2));
    const paddle::Tensor& q = CastPyArg2Tensor(args[0], 0);
    if (!k.defined() || !v.defined()) {
      refuse_slot_arg(args, 1, pvt::names::kDecodeAttention, "the key cache");
      refuse_slot_arg(args, 2, pvt::names::kDecodeAttention, "the value cache");
    }
    if (!k.defined() || !v.defined() || !q.defined()) return none();
    paddle::optional<paddle::Tensor> mask;
    if (args[3] != Py_None) mask = CastPyArg2Tensor(args[3], 3);
    // The kernel reads q and the mask through their strides, so any layout works here.
    return to_python(VTensorDecodeAttention(q, k, v, mask, static_cast<float>(scale))[0]);
  });
}

PyMethodDef kMethods[] = {
    {"append", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fast_append)), METH_FASTCALL,
     "append(cache, tokens, max_seq_len, chunk_bytes, expect_tokens) -> VTensor or None"},
    {"truncate", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fast_truncate)), METH_FASTCALL,
     "truncate(cache, seq_len) -> VTensor or None"},
    {"storage", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fast_storage)), METH_FASTCALL,
     "storage(x) -> storage view [S, B, H, D] of a whole VTensor view, or None"},
    {"is_view", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fast_is_view)), METH_FASTCALL,
     "is_view(x) -> whether x is a whole VTensor view"},
    {"decode_attention", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fast_decode_attention)),
     METH_FASTCALL, "decode_attention(q, k_cache, v_cache, mask, scale) -> out or None"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "paddle_vtensor_fast_calls", nullptr, -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};

}  // namespace

// A module object holding the functions above; Python gets it once through ctypes.PyDLL.
extern "C" PyObject* pvt_fast_calls() { return PyModule_Create(&kModule); }
