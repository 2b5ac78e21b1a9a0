#include "pass_report.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace pvt {
namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\u%04x", c);
          out += hex;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + quoted(items[i]);
  return out + "]";
}

}  // namespace

std::string PassReport::to_json() const {
  return "{\"appends\": " + std::to_string(appends) + ", \"attentions\": " + std::to_string(attentions) +
         ", \"assigns_removed\": " + std::to_string(assigns_removed) +
         ", \"storage_inputs\": " + list(storage_inputs) + ", \"storage_outputs\": " + list(storage_outputs) +
         ", \"copies\": " + list(copies) + ", \"refused\": " + list(refused) + ", \"notes\": " + list(notes) + "}";
}

PassReport& last_report() {
  static PassReport report;
  return report;
}

}  // namespace pvt

extern "C" int pvt_last_pass_report(char* buf, int len) {
  const std::string json = pvt::last_report().to_json();
  if (buf != nullptr && len > 0) {
    const size_t n = std::min(json.size(), static_cast<size_t>(len - 1));
    std::memcpy(buf, json.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int>(json.size());
}
