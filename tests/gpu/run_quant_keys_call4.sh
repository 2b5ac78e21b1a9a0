set -uo pipefail
P=build/qk4; O=$OUT/logs; mkdir -p $O
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $O/machine.txt
b() { n=$1; l=$2; shift 2; timeout $l "$@" > $O/$n.log 2>&1; echo "$n rc=$? pass $(grep -c ^PASS $O/$n.log) fail $(grep -c ^FAIL $O/$n.log) (${SECONDS}s)"; }
b decode_plan 20 $P/test_decode_plan
b bench_plan 60 $P/test_kv_quant_cuda --bench-only
b bench_plan_32_8_64 60 $P/test_kv_quant_cuda --bench-only --model 32,8,64
b bench_st4 60 $P/test_kv_quant_cuda_st4 --bench-only
b bench_plan2 60 $P/test_kv_quant_cuda --bench-only
b sweep_b1 60 $P/test_kv_quant_cuda --sweep --batch 1
b kv_quant 200 $P/test_kv_quant_cuda --no-bench
for f in bench_plan bench_st4 bench_plan2 bench_plan_32_8_64; do echo "## $f"; grep "^BENCH " $O/$f.log | awk 'NF==12{print $2,$3,$4,$5,$6,$7}'; done
grep "^SWEEP" $O/sweep_b1.log | cut -c1-220
tar czf $OUT/logs.tgz -C $OUT logs && rm -r $O
