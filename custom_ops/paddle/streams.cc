#include "streams.h"

#include "../core/seq_cache.h"
#include "op_errors.h"

namespace pvt {

void* stream_of(const paddle::Tensor& t) {
#ifdef PADDLE_VTENSOR_WITH_CUDA
  if (t.place().GetType() == phi::AllocationType::GPU) return static_cast<void*>(t.stream());
#endif
  (void)t;
  return nullptr;
}

void record_cache_use(const void* ptr, const phi::Place& place, void* stream, const char* op) {
  if (place.GetType() != phi::AllocationType::GPU) return;
  if (auto cache = SeqMajorCache::find(ptr)) throw_if_error(cache->record_use(stream), op);
}

}  // namespace pvt
