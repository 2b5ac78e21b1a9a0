# The experiment "vsub": K decoded with the bias (fold as in the source), V decoded exactly (one HSUB2 a pair), no bias tile.
import sys
s=open(sys.argv[1]).read()
def rep(a,b):
    global s
    assert a in s, a[:60]
    s=s.replace(a,b)
rep('''template <typename T, KvQuant kKind, int i>
__device__ __forceinline__ uint32_t code_pair(uint32_t w) {
  if constexpr (biased_int8<T, kKind>()) {
    return __byte_perm(w ^ 0x80808080u, 0x64646464u, i == 0 ? 0x4140 : 0x4342);''','''template <typename T, KvQuant kKind, int i, bool kV = false>
__device__ __forceinline__ uint32_t code_pair(uint32_t w) {
  if constexpr (biased_int8<T, kKind>() && kV) {
    const uint32_t x = __byte_perm(w ^ 0x80808080u, 0x64646464u, i == 0 ? 0x4140 : 0x4342);
    const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&x), __half2half2(__ushort_as_half(0x6480)));
    return *reinterpret_cast<const uint32_t*>(&h);
  } else if constexpr (biased_int8<T, kKind>()) {
    return __byte_perm(w ^ 0x80808080u, 0x64646464u, i == 0 ? 0x4140 : 0x4342);''')
for a in ['lo01','hi01','lo89','hi89']:
    for i in ['0','1']:
        rep(f'code_pair<T, kKind, {i}>({a})',f'code_pair<T, kKind, {i}, true>({a})')
rep('''    if constexpr (kBiased) {
      mma_16816<T>(o[NT], pa, kNegBiasPair, kNegBiasPair);''','''    if constexpr (false) {
      mma_16816<T>(o[NT], pa, kNegBiasPair, kNegBiasPair);''')
rep('float o[kBiased ? NT + 1 : NT][4];','float o[NT][4];')
rep('for (int n = 0; n < (kBiased ? NT + 1 : NT); ++n)','for (int n = 0; n < NT; ++n)')
rep('''  auto fold_bias = [&]() {
    if constexpr (kBiased) {''','''  auto fold_bias = [&]() {
    if constexpr (false) {''')
open(sys.argv[2],'w').write(s)
