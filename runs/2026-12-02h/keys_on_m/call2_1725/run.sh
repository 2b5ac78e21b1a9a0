set -uo pipefail
P=build/qk2; O=$OUT/logs; mkdir -p $O
date -u > $O/machine.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $O/machine.txt
b() { n=$1; shift; timeout 100 "$@" > $O/$n.log 2>&1; echo "$n rc=$?"; }
b rows $P/test_kv_quant_cuda --bench-only --keys-on-m -1
b keys $P/test_kv_quant_cuda --bench-only --keys-on-m 1
b keys_lb3 $P/test_kv_quant_cuda_lb3 --bench-only --keys-on-m 1
b keys_k32 $P/test_kv_quant_cuda --bench-only --keys-on-m 1 --warp-keys 32
b keys_lb3_k32 $P/test_kv_quant_cuda_lb3 --bench-only --keys-on-m 1 --warp-keys 32
b keys_k16 $P/test_kv_quant_cuda --bench-only --keys-on-m 1 --warp-keys 16
b rows2 $P/test_kv_quant_cuda --bench-only --keys-on-m -1
S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats"
timeout 120 ncu --clock-control none --kernel-name regex:mma_ $S $P/test_kv_quant_cuda --profile --keys-on-m -1 > $O/ncu_rows.txt 2>&1; echo ncu_rows $?
timeout 120 ncu --clock-control none --kernel-name regex:mma_ $S $P/test_kv_quant_cuda --profile --keys-on-m 1 > $O/ncu_keys.txt 2>&1; echo ncu_keys $?
timeout 120 ncu --clock-control none --kernel-name regex:mma_ $S $P/test_kv_quant_cuda_lb3 --profile --keys-on-m 1 > $O/ncu_keys_lb3.txt 2>&1; echo ncu_keys_lb3 $?
for f in rows keys keys_lb3 keys_k32 keys_lb3_k32 keys_k16 rows2; do echo "## $f"; grep "^BENCH llama" $O/$f.log | awk '{print $2,$3,$4,$6,$7}'; done
tar czf $OUT/logs.tgz -C $OUT logs && rm -r $O
