// What the ops say about a tensor in their checks and how they name its element type to the kernels:
// one definition for every op file (each used to carry its own copy).
#pragma once

#include <string>

#include "paddle/extension.h"

#include "../kernels/decode_attention.h"

namespace pvt {

// "[2, 5, 3, 8]"
std::string dims_str(const phi::DDim& d);

// The kernels' scalar type of a float32, float16 or bfloat16 tensor (and bool where `allow_bool`:
// attention masks); anything else is refused as "<op>: <what> has dtype D; expected ...".
ScalarType scalar_type_of(phi::DataType dtype, const char* op, const char* what, bool allow_bool = false);

}  // namespace pvt
