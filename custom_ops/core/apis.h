// The core's public face: everything the Paddle adapter and the native harness may use.
// No Paddle, no CUDA runtime headers: plain types, Status returns.
#pragma once

#include "backend.h"
#include "background_mapper.h"
#include "checked_math.h"
#include "chunk_pool.h"
#include "device.h"
#include "lookahead.h"
#include "region.h"
#include "seq_cache.h"
#include "slot_cache.h"
#include "stats.h"
#include "status.h"
#include "step_counters.h"
