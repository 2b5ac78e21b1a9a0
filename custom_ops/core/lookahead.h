// Mapping ahead without a call on the step path (issue 30 point 5): a watched slot cache keeps each
// slot mapped `rows` beyond the length its scheduler last reserved, and the background mapper does
// the mapping on its own schedule. The step path's reserve / reserve_batch only publish lengths and
// mark slots that entered a new chunk (LookaheadMarks: atomic stores, no lock, no wake-up); the
// mapper (background_mapper.h) looks at the watched caches every kLookaheadPoll and maps the marked
// slots to the end of the chunk `rows` ahead (SlotCache::map_lookahead). With rows = one chunk's
// rows, a decoding slot is marked when it enters a chunk and its next chunk is mapped long before
// it crosses (16 steps later for a Llama-3-8B token row in 2 MiB chunks), so the crossing step's
// reserve_batch finds its rows mapped and takes no lock. A slot growing faster than the mapper
// looks (a chunked prefill) is still correct: reserve_batch maps what is missing itself, on the step.
// Ordering: the mapper maps a slot under the cache's lock after reading its published length there;
// release forgets the slot's length under the same lock, so a released slot is never mapped again
// by a look (the gate of queued batches is not involved: nothing is queued).
// Costs: the mapper thread wakes every kLookaheadPoll while any cache is watched (a timed futex
// wait); one relaxed store per slot per reserve on the step path.
// fork(): the child keeps the registry; its own mapper thread starts at its first map_ahead or
// watch_ahead call.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "slot_cache.h"

namespace pvt {

// How often the mapper looks at the watched caches: far below a decode step (8-16 ms at 64-256
// slots of Llama-3-8B on an H200), so a slot's next chunk is mapped within a step of its mark.
constexpr std::chrono::microseconds kLookaheadPoll{1000};

// Watch `cache`: keep every slot it reserves mapped `rows` beyond its reserved length (rows 0:
// stop watching). Starts the mapper thread if needed. kInvalidArgument for rows < 0 or past
// max_seq_len; the errors of starting the mapper thread. The registry holds the cache weakly.
Status watch_ahead(const std::shared_ptr<SlotCache>& cache, int64_t rows);
// The mapper thread's part: whether any cache is watched (a timed wait then), and one look at every
// watched live cache (forgets the dead ones). Returns the slots mapped.
bool lookahead_watching();
int64_t lookahead_look();

}  // namespace pvt
