// C entry point of the watched slot caches (issue 30 point 5, core/lookahead.h): the background mapper keeps
// every slot of the cache mapped `rows` beyond the length last reserved for it, so the scheduler's step makes
// no queue call (its reserve only publishes lengths). Python: paddle_vtensor/map_ahead.py (watch_ahead).
#include <cstdint>

#include "../core/apis.h"
#include "slot_c_api_support.h"

using pvt::c_api::find;
using pvt::c_api::report;

extern "C" {

// Watch the cache at `ptr` with `rows` of look-ahead (0: stop watching). kInvalidArgument for rows < 0 or
// past max_seq_len (the cache as before); the errors of starting the mapper thread.
int pvt_watch_ahead(const void* ptr, int64_t rows, char* err, int64_t err_len) {
  int code = 0;
  auto cache = find(ptr, err, err_len, &code);
  if (!cache) return code;
  return report(pvt::watch_ahead(cache, rows), err, err_len);
}

}  // extern "C"
