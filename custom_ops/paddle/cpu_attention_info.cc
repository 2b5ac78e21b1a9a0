// C entry point for what the host decode attention runs with (bench-attention records it).
#include "../kernels/decode_attention_cpu.h"

extern "C" {

// The instruction-set build ("avx512", "avx2", "scalar") and the thread count of the next call.
const char* pvt_cpu_attention_isa() { return pvt::decode_attention_cpu_isa(); }
int pvt_cpu_attention_threads() { return pvt::decode_attention_cpu_threads(); }

}  // extern "C"
