// Status: what every core and kernel function returns instead of throwing or exiting.
// The Paddle adapter turns a non-ok Status into a Python exception; the native harness prints it.
#pragma once

#include <new>
#include <string>
#include <utility>

namespace pvt {

enum class Code {
  kOk = 0,
  kInvalidArgument,  // the caller asked for something malformed (misaligned range, zero size, ...)
  kOutOfRange,       // past the reserved virtual range, or truncating past the end
  kOutOfMemory,      // physical memory could not be mapped (driver OOM or the configured limit)
  kDriver,           // any other failure reported by the OS or the CUDA driver
  kUnsupported,      // e.g. a CUDA device asked of a build without CUDA
  kConflict,         // a write would overwrite tokens another live view sees (caller copies first)
};

const char* code_name(Code code);

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OutOfMemory: <message>": what the adapter puts into the Python exception.
  std::string to_string() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Runs `body` (a callable returning Status) and turns a failed host allocation inside it into
// kOutOfMemory: every core entry point that may allocate goes through it, so running out of host
// memory is an error the caller sees, never std::terminate. `what` names the operation.
template <typename Body>
Status catch_bad_alloc(const char* what, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    try {
      return Status(Code::kOutOfMemory, std::string(what) + ": host memory ran out");
    } catch (...) {
      return Status(Code::kOutOfMemory, std::string());  // not even the message fits
    }
  }
}

}  // namespace pvt

#define PVT_RETURN_IF_ERROR(expr)           \
  do {                                      \
    ::pvt::Status _pvt_status = (expr);     \
    if (!_pvt_status.ok()) return _pvt_status; \
  } while (0)
