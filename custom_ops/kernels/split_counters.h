// Split counters for the decode attention's last-block merge (DecodeAttentionParams::split_counters), kept by
// the process for each (device, stream): what the callers that own no such memory use (the Paddle ops, the
// GPU harness's extension and C API). The kernels' API stays caller-owns-memory; this is one such caller.
#pragma once

#include "../core/status.h"
#include "decode_attention.h"
#include "decode_attention_plan.h"

namespace pvt {

// Where `plan` uses split counters (Plan::split_counters > 0), points p->split_counters at the zeroed
// counters of the current device and `stream` (a cudaStream_t), made on first use (zeroed on `stream`) and
// grown when a larger count is needed, and kept for the process (never freed: a captured CUDA graph may
// hold their address). Per stream because calls on two streams may run at the same time and must not share
// counters; calls on one stream run in order and leave them zero. While `stream` is being captured into a
// graph and no counters large enough exist yet, p is left without them (the merge kernel then merges: no
// allocation inside a capture). Not for the per-thread default stream (cudaStreamPerThread: one handle for
// several streams), nor for graphs replayed on several streams at once (one stream's counters in both).
Status attach_split_counters(const decode_plan::Plan& plan, void* stream, DecodeAttentionParams* p);

}  // namespace pvt
