#!/usr/bin/env bash
# finish_block writing whole 16-byte pieces (decode_attention_merge_cuda.cuh: out_in_pieces, write_piece, a cluster's
# merge of 2, 4 or 8 peers) and the merge kernels' shared row fold (merge_row), on the GPU, from binaries built
# without one into PRE: test_decode_plan, test_decode_attention, test_decode_attention_broken_pieces (ONLY=pieces
# tests/gpu/break_mma_families.sh) and test_decode_attention_broken_warp (BREAK=warp tests/gpu/break_merge.sh).
#   STEP=checks (default): the plan's checks; --families-only (the family cases, then the same with a misaligned
#     output: element by element); the pieces copy's --families-only (every case ending in its blocks must fail,
#     no out_offset.* one); --merge-only and the warp copy's (the warp kernel's cases must fail, no other);
#     memcheck of --families-only (cut at MEMCHECK_S, default 45).
#   STEP=tables: the whole family table (bench_families.py --capi, extra args passed on) with BASE's library
#     (a libpvt_spec.so of the kernels before) and build/spec_capi's in turn, each in its own process (TABLES:
#     the order, default "base1 new1"; "base1 new1 base2 new2" twice); the counts within 1.05x / 1.10x of each and the rows that moved; then Nsight Compute
#     of three short calls with each library (tests/gpu/ncu_mqa.sh: each kernel's instructions and time).
# Logs: $OUT/logs.tgz; tables in $OUT.
# MERGE=0: no merge steps; NCU="": no Nsight Compute (NCU=new: the new library's only).
# Usage: [STEP=checks|tables] [BASE=DIR] bash tests/gpu/run_pieces.sh PRE [bench_families.py args...]
set -uo pipefail
cd "$(dirname "$0")/../.."
P=$1; shift
source tests/gpu/run_lib.sh  # O, run, finish
echo "sources: tree $(bash tests/gpu/sources_digest.sh), prebuilt $(cat "$P/sources.sha256")" | tee -a "$O/machine.txt"
if [ "${STEP:-checks}" = checks ]; then
  run decode_plan 30 "$P/test_decode_plan"
  run families 100 "$P/test_decode_attention" --families-only
  echo "out_offset cases passed $(grep -c '^PASS out_offset\.' "$O/families.log")"
  run broken_pieces 45 "$P/test_decode_attention_broken_pieces" --families-only
  echo "broken pieces: failing out_offset cases $(grep -c '^FAIL out_offset\.' "$O/broken_pieces.log"), passing others:" \
    "$(grep '^PASS' "$O/broken_pieces.log" | grep -v '^PASS out_offset\.' | sed 's/:.*//' | head -8 | tr '\n' ' ')"
  if [ "${MERGE:-1}" = 1 ]; then
    run merge 100 "$P/test_decode_attention" --merge-only
    grep '^info' "$O/merge.log"
    run broken_warp 60 "$P/test_decode_attention_broken_warp" --merge-only
    echo "broken warp: failing passes $(grep -E '^FAIL' "$O/broken_warp.log" | cut -d. -f1 | sort | uniq -c | tr '\n' ' ')"
  fi
  echo "== memcheck (start ${SECONDS}s)"
  timeout "${MEMCHECK_S:-45}" compute-sanitizer --tool memcheck "$P/test_decode_attention" --families-only > "$O/memcheck.log" 2>&1
  grep -E "ERROR SUMMARY" "$O/memcheck.log"; echo "memcheck passed $(grep -c '^PASS' "$O/memcheck.log"), failed $(grep -c '^FAIL' "$O/memcheck.log")"
else
  mkdir -p build/spec_capi_new && cp build/spec_capi/libpvt_spec.so build/spec_capi_new/
  for t in ${TABLES:-base1 new1}; do
    case $t in base*) cp "$BASE/libpvt_spec.so" build/spec_capi/ ;; *) cp build/spec_capi_new/libpvt_spec.so build/spec_capi/ ;; esac
    run "table_$t" 150 python3 tests/gpu/bench_families.py "$O/$t.json" --capi "$@"
  done
  # Nsight Compute of three short calls with each library (instructions and time of each kernel, ours then cuDNN).
  for t in ${NCU-base new}; do
    case $t in base) cp "$BASE/libpvt_spec.so" build/spec_capi/ ;; *) cp build/spec_capi_new/libpvt_spec.so build/spec_capi/ ;; esac
    SOURCE=$([ $t = new ] && echo 1) OUT=$O/ncu_$t CAPI=1 SDPA=cudnn PROFILES=$'falcon_b64_s512 71 1 64 64 512\nstarcoder_b16_s512 48 1 128 16 512\nmqa32_b1_s2k 32 1 128 1 2048' \
      timeout 150 bash tests/gpu/ncu_mqa.sh > "$O/ncu_$t.log" 2>&1
    tar xzf "$O/ncu_$t/ncu.tgz" -C "$O/ncu_$t" 2>/dev/null
    for c in "$O"/ncu_$t/ncu/*.csv; do
      case $c in *.sass.csv) continue ;; esac  # the source counters (SOURCE=1): read, not summed
      python3 - "$c" "$t" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hi = [i for i, r in enumerate(rows) if "Kernel Name" in r][0]
for r in rows[hi + 2:]:
    d = dict(zip(rows[hi], r))
    print("NCU", sys.argv[2], sys.argv[1].rsplit("/", 1)[1][:-4], d["Kernel Name"][:60], "us", d.get("gpu__time_duration.sum"),
          "inst", d.get("smsp__inst_executed.sum"), "regs", d.get("launch__registers_per_thread"))
PY
    done
  done
  cp build/spec_capi_new/libpvt_spec.so build/spec_capi/
  python3 - "$O" <<'PY'
import json, os, sys
o = sys.argv[1]
tabs = {t: {(r["family"], r["dtype"], r["B"], r["S"], r["Tq"]): r for r in json.load(open(f"{o}/{t}.json"))["rows"]
            if "slot_vs_best" in r} for t in ("base1", "new1", "base2", "new2") if os.path.exists(f"{o}/{t}.json")}
for t, rs in tabs.items():
    v = list(rs.values())
    print("TABLE", t, len(v), "rows; per slot within 1.05x", sum(r["slot_vs_best"] <= 1.05 for r in v), "1.10x",
          sum(r["slot_vs_best"] <= 1.10 for r in v), "; seq", sum(r["seq_vs_best"] <= 1.05 for r in v),
          sum(r["seq_vs_best"] <= 1.10 for r in v))
if {"base1", "new1"} <= set(tabs):
    for k in tabs["new1"]:
        b = [tabs[t][k]["ours_slot_us"] for t in ("base1", "base2") if k in tabs.get(t, {})]
        n = [tabs[t][k]["ours_slot_us"] for t in ("new1", "new2") if k in tabs.get(t, {})]
        if b and n and abs(min(n) / min(b) - 1) > 0.03:
            r = tabs["new1"][k]
            print("MOVED", *k, r["plan_slot"], "base", min(b), "new", min(n), f"{min(n) / min(b):.3f}", "sdpa", r["sdpa_best_us"])
    for k, r in tabs["new1"].items():
        if r["slot_vs_best"] > 1.10:
            print("OVER", *k, r["plan_slot"], r["slot_vs_best"], r["seq_vs_best"])
PY
  cp "$O"/*.json "${OUT:-/tmp/out}/" 2>/dev/null
fi
finish
