#include "status.h"

namespace pvt {

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "Ok";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kOutOfRange: return "OutOfRange";
    case Code::kOutOfMemory: return "OutOfMemory";
    case Code::kDriver: return "DriverError";
    case Code::kUnsupported: return "Unsupported";
    case Code::kConflict: return "Conflict";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  return ok() ? std::string("Ok") : std::string(code_name(code_)) + ": " + message_;
}

}  // namespace pvt
