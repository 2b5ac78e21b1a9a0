// What the host decode attention runs with (reported by the bench-attention subcommand).
#pragma once

namespace pvt {

// The instruction-set build of the inner loop the next call uses: "avx512", "avx2" or "scalar"
// (the best the CPU has, or lower when asked: PADDLE_VTENSOR_CPU_ISA, read once per process, or
// decode_attention_cpu_set_isa).
const char* decode_attention_cpu_isa();
// Ask for "scalar", "avx2" or "avx512" (never above what the CPU has); nullptr: the best again.
// False (nothing changed) for another name.
bool decode_attention_cpu_set_isa(const char* name);
// Threads a call runs on (cpu_thread_pool.h: PADDLE_VTENSOR_NUM_THREADS or the usable CPUs).
int decode_attention_cpu_threads();

}  // namespace pvt
