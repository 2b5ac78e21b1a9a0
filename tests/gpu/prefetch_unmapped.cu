// Probe: does prefetch.global.L2 on a reserved but unmapped virtual address (driver VMM) fault on this GPU?
// And on an address never reserved? Prints one line per case; the process survives or not.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
__global__ void pf(const char* p, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + 128 * i));
}
__global__ void ld(const char* p, int* out) { *out = p[threadIdx.x]; }
int main(int argc, char** argv) {
  cuInit(0);
  CUdevice d; cuDeviceGet(&d, 0);
  CUcontext c; cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
  size_t gran = 0;
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  CUdeviceptr va;
  CUresult r = cuMemAddressReserve(&va, 8 * gran, 0, 0, 0);
  printf("reserve %d gran %zu\n", r, gran);
  // map the first chunk only
  CUmemGenericAllocationHandle h;
  r = cuMemCreate(&h, gran, &prop, 0); printf("create %d\n", r);
  r = cuMemMap(va, gran, 0, h, 0); printf("map %d\n", r);
  CUmemAccessDesc acc = {}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = cuMemSetAccess(va, gran, &acc, 1); printf("access %d\n", r);
  const int mode = argc > 1 ? atoi(argv[1]) : 0;
  const char* p = reinterpret_cast<const char*>(va);
  if (mode == 0) pf<<<4, 128>>>(p, 1024);                       // mapped
  if (mode == 1) pf<<<4, 128>>>(p + 2 * gran, 1024);            // reserved, unmapped
  if (mode == 2) pf<<<4, 128>>>(reinterpret_cast<const char*>(0x10), 1024);  // near null
  if (mode == 3) { int* o; cudaMalloc(&o, 4); ld<<<1, 32>>>(p + 2 * gran, o); }  // a load: expected to fault
  cudaError_t e = cudaDeviceSynchronize();
  printf("mode %d sync: %s\n", mode, cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
