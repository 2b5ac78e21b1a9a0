// C entry point for what the host decode attention runs with (bench-attention records it).
#include "../kernels/decode_attention_cpu.h"

extern "C" {

// The instruction-set build ("avx512", "avx2", "scalar") and the thread count of the next call.
const char* pvt_cpu_attention_isa() { return pvt::decode_attention_cpu_isa(); }
// 1 when `name` ("scalar", "avx2", "avx512", or null for the best) was taken, else 0.
int pvt_set_cpu_attention_isa(const char* name) { return pvt::decode_attention_cpu_set_isa(name) ? 1 : 0; }
int pvt_cpu_attention_threads() { return pvt::decode_attention_cpu_threads(); }

}  // extern "C"
