#include "op_errors.h"

#include "paddle/extension.h"

namespace pvt {

void throw_if_error(const Status& status, const char* op) {
  if (!status.ok()) PD_THROW(op, ": ", status.to_string());
}

}  // namespace pvt
