// Tiny test reporter shared by the native tests: one line per check ("PASS name" or
// "FAIL name: why"), a closing "N passed, M failed", and a non-zero exit on any failure.
#pragma once

#include <cstdio>
#include <string>

#include "core/status.h"

namespace pvt_test {

class Report {
 public:
  // Records one check; returns `ok` so callers can stop a test whose later steps depend on it.
  bool check(bool ok, const std::string& name, const std::string& why = "") {
    if (ok) {
      ++passed_;
      std::printf("PASS %s\n", name.c_str());
    } else {
      ++failed_;
      std::printf("FAIL %s: %s\n", name.c_str(), why.empty() ? "check failed" : why.c_str());
    }
    std::fflush(stdout);
    return ok;
  }
  // A status that must be ok.
  bool ok(const pvt::Status& s, const std::string& name) { return check(s.ok(), name, s.to_string()); }
  // A status that must fail with `code`.
  bool code(const pvt::Status& s, pvt::Code code, const std::string& name) {
    return check(s.code() == code, name,
                 std::string("expected ") + pvt::code_name(code) + ", got " + s.to_string());
  }
  template <typename A, typename B>
  bool eq(const A& got, const B& want, const std::string& name) {
    return check(got == static_cast<A>(want), name,
                 "got " + std::to_string(got) + ", want " + std::to_string(static_cast<A>(want)));
  }
  int finish() const {
    std::printf("%d passed, %d failed\n", passed_, failed_);
    return failed_ == 0 ? 0 : 1;
  }

 private:
  int passed_ = 0;
  int failed_ = 0;
};

}  // namespace pvt_test
