// The one place the ops queue a write into a cache (append, migration, copy-on-write): picks the
// CPU or CUDA kernel, counts the bytes written, and records the stream with the caches it touches.
#pragma once

#include "paddle/extension.h"

#include "../kernels/append_tokens.h"

namespace pvt {

// Queue dst[pos + t, b, h, d] = src[b, t, h, d] on the place of the tensors (CPU or CUDA), under a
// DeviceGuard. After the launch: MemoryStats::bytes_written grows by the bytes written, and on a
// GPU the destination cache (and the source, when it is a cache too) records `stream`, so neither
// is released before the copy has run.
void launch_append(const AppendParams& params, const phi::Place& place, void* stream,
                   const char* op);

}  // namespace pvt
