// What the host decode attention runs with (reported by the bench-attention subcommand).
#pragma once

namespace pvt {

// The instruction-set build of the inner loop the next call uses: "avx512", "avx2" or "scalar"
// (the best the CPU has, or lower when PADDLE_VTENSOR_CPU_ISA asks).
const char* decode_attention_cpu_isa();
// Threads a call runs on (cpu_thread_pool.h: PADDLE_VTENSOR_NUM_THREADS or the usable CPUs).
int decode_attention_cpu_threads();

}  // namespace pvt
