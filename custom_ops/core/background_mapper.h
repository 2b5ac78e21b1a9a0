// Background mapper (issue 30 point 2): one thread per process that carries out a slot cache's
// reservations while the caller goes on, so a scheduler maps the next step's chunks while the
// current step runs on the device (vAttention's step_async). map_ahead() checks the batch on the
// calling thread (a bad slot or length is refused at once, nothing queued), announces it on the
// cache's AheadGate and queues it; the thread runs SlotCache::reserve_batch (all or nothing).
// Ordering: every later call on that cache (reserve, release, share, an op's SlotCacheHold) waits
// for the batches queued before it, so it sees them done, in program order. That wait is a host
// wait, and only when the thread has not finished yet: when it ran during the step it is one
// atomic load. No device sync anywhere: mapping needs none (reserve waits for no stream).
// Results: wait_ahead(ticket) blocks until the batch is done and returns its status (the batch's
// error, e.g. kOutOfMemory, with the cache as it was before the batch); a ticket is forgotten
// after its wait or forget_ahead.
// Prefetches (AheadKind::kPrefetch): rows a slot needs steps later (a scheduler asks, when a slot
// enters a chunk, for the whole next chunk, so its crossing 16 steps later finds it mapped). The
// mapper maps them slot by slot, each slot under the cache's lock on its own (so a step's
// record_use or reserve waits at most for one slot's mapping, never for the batch), each slot all
// or nothing, stopping at the first error (the ticket's status; slots before it stay mapped: the
// mapping was only a head start). Reserve and the ops do not wait for a prefetch; release, share
// and make_private do (ahead_gate.h).
// Batches run in submission order, one at a time, on one thread for every cache and device. The
// thread runs as SCHED_BATCH: waking it never preempts the thread that queued the batch (with
// SCHED_OTHER the kernel may run the woken mapper on the caller's CPU and leave the caller waiting
// for a migration while the mapper makes its driver calls). Queuing once cost 290-330 µs on the H200
// when many slots crossed, against 14 µs when none did, and 8-29 µs at p99 after this and two other
// changes; which of the three mattered is not isolated (PERFORMANCE_H200.md 6c).
// Watched caches (lookahead.h): while any is watched the thread waits at most kLookaheadPoll and
// looks at them between batches, so the step path needs no queue call to map a chunk ahead.
// fork(): the child has no mapper thread; batches queued in the parent when it forked are failed
// there (their caches' gates opened) and a later map_ahead starts the child's own thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "slot_cache.h"

namespace pvt {

using AheadTicket = uint64_t;

// Queues reserve_batch(slots, tokens) of `cache` (kPrefetch: SlotCache::prefetch); *ticket names it
// (never 0). Errors of the checks (SlotCache::check_batch) are returned at once and nothing is queued.
Status map_ahead(std::shared_ptr<SlotCache> cache, std::vector<int64_t> slots, std::vector<int64_t> tokens,
                 AheadTicket* ticket, AheadKind kind = AheadKind::kBatch);
// Whether the mapper thread of this process runs as SCHED_BATCH (false before its first batch).
bool mapper_runs_as_batch();
// Blocks until the batch of `ticket` has run; returns its status and forgets the ticket.
// kInvalidArgument for a ticket not handed out, or already waited for or forgotten.
Status wait_ahead(AheadTicket ticket);
// Without blocking: whether the batch of `ticket` has run (false for an unknown ticket).
bool ahead_done(AheadTicket ticket);
// Drops `ticket`: its batch still runs, its status is not kept.
void forget_ahead(AheadTicket ticket);
// Tickets handed out and neither waited for nor forgotten (tests: nothing is left behind).
size_t ahead_tickets();
// Starts the mapper thread if this process has none and wakes it (watch_ahead, lookahead.h: the
// thread then looks at the watched caches every kLookaheadPoll between batches).
Status wake_mapper();

}  // namespace pvt
