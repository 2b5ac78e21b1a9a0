set -uo pipefail
O=$OUT/logs; mkdir -p $O
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $O/machine.txt
export MAX_JOBS=16 PADDLE_VTENSOR_TORCH_BUILD=/tmp/pvt_torch
s=$SECONDS; timeout 330 python3 tests/gpu/build.py > $O/ext_build.log 2>&1; echo "build rc=$? $((SECONDS-s))s"
s=$SECONDS; timeout 120 python3 tests/gpu/quant_loop_accuracy.py $O/acc_kv8.json --kv-heads 8 > $O/acc.log 2>&1; echo "acc rc=$? $((SECONDS-s))s"; cat $O/acc.log | cut -c1-300
for dt in float8_e4m3fn int8; do s=$SECONDS; timeout 60 python3 tests/gpu/llama_loop.py $O/loop_$dt.json --kv-heads 8 --quick --only 8,4096 --cache-dtype $dt > $O/loop_$dt.log 2>&1; echo "loop $dt rc=$? $((SECONDS-s))s"; done; python3 -c "import json,sys; [print(r) for f in sys.argv[1:] for r in json.load(open(f))[\"rows\"]]" $O/loop_*.json | cut -c1-600
tar czf $OUT/logs.tgz -C $OUT logs && rm -r $O
