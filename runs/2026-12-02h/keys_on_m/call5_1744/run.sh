set -uo pipefail
O=$OUT/logs; mkdir -p $O
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $O/machine.txt
export MAX_JOBS=16 PADDLE_VTENSOR_TORCH_BUILD=/tmp/pvt_torch
s=$SECONDS; timeout 330 python3 tests/gpu/build.py > $O/ext_build.log 2>&1; echo "build rc=$? $((SECONDS-s))s"
s=$SECONDS; timeout 120 python3 tests/gpu/quant_loop_accuracy.py $O/acc_kv8.json --kv-heads 8 > $O/acc.log 2>&1; echo "acc rc=$? $((SECONDS-s))s"; cat $O/acc.log | cut -c1-300
s=$SECONDS; timeout 60 python3 tests/gpu/llama_loop.py $O/loop_fp8.json --kv-heads 8 --quick --only 8,4096 --cache-dtype float8_e4m3fn > $O/loop_fp8.log 2>&1; echo "loop rc=$? $((SECONDS-s))s"; tail -5 $O/loop_fp8.log | cut -c1-300
tar czf $OUT/logs.tgz -C $OUT logs && rm -r $O
