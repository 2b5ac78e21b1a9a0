#!/usr/bin/env bash
# Run 29 on the H200, from the repository root, OUT=<folder>: sweep29.py (the rows nearest 1.05x cuDNN) with
# four builds: this tree (base), cp.async with the .L2::128B or .L2::256B prefetch size (cp128, cp256), and
# cp256 plus the one-row kernel's 16-byte loads as ld.global.nc.L1::no_allocate.L2::256B (ld256); each
# variant twice, in its own process, in the order base cp128 cp256 ld256 ld256 cp256 cp128 base. Then the
# Llama loop's GQA B=32 1k row (5 rounds, host launch times) and MHA B=8 1k (the same attention grid), and
# the attention table (GQA, MHA: separate processes).
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run29.tgz logs); }
ts start
export PYTHONUNBUFFERED=1
mk() { rm -rf /tmp/$1 && mkdir -p /tmp/$1/tests && cp -r custom_ops /tmp/$1/ && cp -r tests/gpu /tmp/$1/tests/ && cp sweep29.py /tmp/$1/; }
mk base; mk cp128; mk cp256; mk ld256
sed -i 's/cp.async.cg.shared.global \[/cp.async.cg.shared.global.L2::128B [/' /tmp/cp128/custom_ops/kernels/decode_attention_rows_cuda.cuh
for v in cp256 ld256; do sed -i 's/cp.async.cg.shared.global \[/cp.async.cg.shared.global.L2::256B [/' /tmp/$v/custom_ops/kernels/decode_attention_rows_cuda.cuh; done
python3 - <<'PY'
p='/tmp/ld256/custom_ops/kernels/decode_attention_common_cuda.cuh'
s=open(p).read()
old='''    return __ldg(reinterpret_cast<const uint4*>(p));'''
new='''#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\\n"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
#else
    return __ldg(reinterpret_cast<const uint4*>(p));
#endif'''
assert old in s
open(p,'w').write(s.replace(old,new))
PY
grep -c "L2::" /tmp/*/custom_ops/kernels/decode_attention_rows_cuda.cuh /tmp/*/custom_ops/kernels/decode_attention_common_cuda.cuh > $L/variants.txt
for v in base cp128 cp256 ld256; do (cd /tmp/$v && python3 tests/gpu/build.py > $L/build_$v.log 2>&1; echo "rc=$?" >> $L/build_$v.log) & done
wait
ts built
for v in base cp128 cp256 ld256 ld256 cp256 cp128 base; do
  n=1; [ -f $L/sweep_${v}_1.json ] && n=2
  (cd /tmp/$v && python3 sweep29.py $L/sweep_${v}_$n.json > $L/sweep_${v}_$n.log 2>&1)
  ts sweep $v $n
done
python3 tests/gpu/llama_loop.py $L/llama_gqa_b32_1k.json --kv-heads 8 --rounds 5 --only 32,1024 > $L/llama_gqa_b32_1k.log 2>&1
ts llama gqa row
python3 tests/gpu/llama_loop.py $L/llama_mha_b8_1k.json --kv-heads 32 --rounds 5 --only 8,1024 > $L/llama_mha_b8_1k.log 2>&1
ts llama mha row
python3 tests/gpu/bench_attention.py $L/bench_gqa.json --kv-heads 8 > $L/bench_gqa.log 2>&1
ts bench gqa done
python3 tests/gpu/bench_attention.py $L/bench_mha.json --kv-heads 32 > $L/bench_mha.log 2>&1
ts bench mha done
