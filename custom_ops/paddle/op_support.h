// What every op file includes: the allocation and storage views, errors, the device guard, streams
// and the append launch (each in its own file), plus the shared op and attribute names.
#pragma once

#include "../op_names.h"
#include "device_guard.h"
#include "launch_append.h"
#include "op_errors.h"
#include "op_tensor_info.h"
#include "streams.h"
#include "vtensor_allocation.h"
