// Which stream an op's work runs on, and telling a cache that work queued there uses it, so the
// cache's memory is released only after that work (writes and reads alike) has finished.
#pragma once

#include "paddle/extension.h"

namespace pvt {

// The stream ops on `t` run on (nullptr on the CPU), as the core's void*.
void* stream_of(const paddle::Tensor& t);
// When `ptr` lies in a cache on a GPU, records that work queued on `stream` so far touches that
// cache (SeqMajorCache::record_use); call it after queuing the work. Throws naming `op` on a driver
// error. Nothing to do on the CPU: host kernels have finished when they return.
void record_cache_use(const void* ptr, const phi::Place& place, void* stream, const char* op);

}  // namespace pvt
