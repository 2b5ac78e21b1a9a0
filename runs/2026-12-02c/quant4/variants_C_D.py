# Experiments on the source: C = the K loop in main's order (n8 tile outer); D = K decoded exactly (HSUB2), no K bias.
import sys
src, kind, out = sys.argv[1], sys.argv[2], sys.argv[3]
s=open(src).read()
def rep(a,b):
    global s
    assert a in s, a[:70]
    s=s.replace(a,b)
if kind=='C':
    a=s.index('    // kg and j outer, the n8 tile inner')
    b=s.index('    if constexpr (kBiased) {  // after the MMAs')
    s=s[:a]+'''#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int key = kw + nt * 8 + g;
#pragma unroll
      for (int kg = 0; kg < D / 64; ++kg) {
        const uint4 w4 = *reinterpret_cast<const uint4*>(tile_k(st) + chunk_at<D>(key, 4 * kg + t));
        const uint32_t w[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_16816<T>(s[nt], qa[4 * kg + j], code_pair<T, kKind, 0>(w[j]), code_pair<T, kKind, 1>(w[j]));
      }
    }
'''+s[b:]
elif kind=='D':
    rep('''template <typename T, KvQuant kKind, int i>
__device__ __forceinline__ uint32_t code_pair(uint32_t w) {
  if constexpr (biased_int8<T, kKind>()) {
    return __byte_perm(w ^ 0x80808080u, 0x64646464u, i == 0 ? 0x4140 : 0x4342);''','''template <typename T, KvQuant kKind, int i, bool kV = false>
__device__ __forceinline__ uint32_t code_pair(uint32_t w) {
  if constexpr (biased_int8<T, kKind>() && !kV) {
    const uint32_t x = __byte_perm(w ^ 0x80808080u, 0x64646464u, i == 0 ? 0x4140 : 0x4342);
    const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&x), __half2half2(__ushort_as_half(0x6480)));
    return *reinterpret_cast<const uint32_t*>(&h);
  } else if constexpr (biased_int8<T, kKind>()) {
    return __byte_perm(w ^ 0x80808080u, 0x64646464u, i == 0 ? 0x4140 : 0x4342);''')
    for a in ['lo01','hi01','lo89','hi89']:
        for i in ['0','1']:
            rep(f'code_pair<T, kKind, {i}>({a})',f'code_pair<T, kKind, {i}, true>({a})')
    rep('''    if constexpr (kBiased) {  // after the MMAs''','''    if constexpr (false) {  // after the MMAs''')
open(out,'w').write(s)
