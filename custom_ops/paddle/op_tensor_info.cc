#include "op_tensor_info.h"

namespace pvt {

std::string dims_str(const phi::DDim& d) {
  std::string s = "[";
  for (int i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

ScalarType scalar_type_of(phi::DataType dtype, const char* op, const char* what, bool allow_bool) {
  switch (dtype) {
    case phi::DataType::FLOAT32: return ScalarType::kFloat32;
    case phi::DataType::FLOAT16: return ScalarType::kFloat16;
    case phi::DataType::BFLOAT16: return ScalarType::kBFloat16;
    case phi::DataType::BOOL:
      if (allow_bool) return ScalarType::kBool;
      break;
    default:
      break;
  }
  PD_THROW(op, ": ", what, " has dtype ", phi::DataTypeToString(dtype), "; expected float32, float16 or bfloat16",
           allow_bool ? " (or bool for the mask)" : "");
}

}  // namespace pvt
