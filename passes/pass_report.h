// What the last run of vtensor_kv_cache_pass did and why, kept for Python (paddle_vtensor.passes
// reads it through the C entry point below) and printed to the log by the pass itself.
#pragma once

#include <string>
#include <vector>

namespace pvt {

struct PassReport {
  int appends = 0;          // concats rewritten into custom_op.vtensor_append
  int attentions = 0;       // attention chains rewritten into custom_op.vtensor_decode_attention
  int assigns_removed = 0;  // whole-cache assign copies bypassed
  std::vector<std::string> storage_inputs;   // program inputs that now take [S, B, H, D]
  std::vector<std::string> storage_outputs;  // program outputs that now give [S, B, H, D]
  std::vector<std::string> copies;   // what still materialises a cache-sized tensor, and why
  std::vector<std::string> refused;  // why the program was left unchanged (empty when it was not)
  std::vector<std::string> notes;    // why there was nothing to do

  void clear() { *this = PassReport(); }
  // One JSON object; strings are escaped for JSON.
  std::string to_json() const;
};

// The report of the pass run that finished last in this process.
PassReport& last_report();

}  // namespace pvt

// Copies the last report as JSON into buf (NUL-terminated, truncated to len - 1 bytes) and returns
// the full length, so a caller can retry with a larger buffer.
extern "C" int pvt_last_pass_report(char* buf, int len);
