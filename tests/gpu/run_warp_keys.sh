#!/usr/bin/env bash
# The key-slice tensor-core kernel with 32 keys a warp (DecodeOptions::mma_warp_keys: 4-warp instances of one M-tile at
# head_dim 64 and of two at 64-128) on the GPU, from binaries built without one into PRE (PRE/bins.tar.xz):
# test_decode_plan, test_decode_attention, test_decode_attention_broken_warpkeys (ONLY=warpkeys
# tests/gpu/break_mma_families.sh), libpvt_spec.so (these kernels), libpvt_spec_base.so (the kernels before) and,
# where present, libpvt_spec_rows5.so (a candidate timed on Falcon's rows only).
#   STEP=checks (default): the plan's checks; --families-only (its warp_keys32.* passes must run every such
#     instance); the broken copy's where PRE has one (the warp_keys32.* cases that plan such an instance must fail, no
#     other case); memcheck of --families-only (cut at MEMCHECK_S, default 40).
#   STEP=tables: the family rows of 17+ query rows a kv head with these kernels plus the _k32 variants
#     (bench_families.py --capi; variants are timed where their plan differs; TABLE_REST=1: the other rows too), with
#     the base library where BASE=1, Falcon's rows with the rows5 library, and bench_mixed.py (issue 32 point 3:
#     skewed per-slot batches). Summary: each table's counts within 1.05x / 1.10x, per row the best _k32 variant
#     against the plan's own time, the rows5 library's Falcon rows against these kernels'.
#   STEP=rule: the whole family table with these kernels (both dtypes), then Falcon's and MQA 32/1's fp16 rows with
#     the rule off (_k16), off with 4 warps (_w4k16) and two M-tiles of 32 keys (_k32rt2) in one process.
#     Summary: the table's counts, and per row the plan's time against each variant's.
# Logs: $OUT/logs.tgz; tables in $OUT.
# Usage: [STEP=checks|tables] bash tests/gpu/run_warp_keys.sh PRE
set -uo pipefail
cd "$(dirname "$0")/../.."
P=$1
source tests/gpu/run_lib.sh  # O, run, finish
tar -xJf "$P/bins.tar.xz" -C "$P"
echo "sources: tree $(bash tests/gpu/sources_digest.sh), prebuilt $(cat "$P/sources.sha256")" | tee -a "$O/machine.txt"
if [ "${STEP:-checks}" = checks ]; then
run decode_plan 30 "$P/test_decode_plan"
run families 150 "$P/test_decode_attention" --families-only
grep -E '^(PASS|FAIL) warp_keys32\.ran_' "$O/families.log"
echo "warp_keys32 cases passed $(grep -c '^PASS warp_keys32\.' "$O/families.log")"
if [ -x "$P/test_decode_attention_broken_warpkeys" ]; then
  run broken 120 "$P/test_decode_attention_broken_warpkeys" --families-only
  echo "broken: failing cases by pass $(grep '^FAIL' "$O/broken.log" | sed 's/\..*//' | sort | uniq -c | tr '\n' ' ')"
  echo "broken: failing plan checks $(grep -c '^FAIL.*\.plan' "$O/broken.log"), passing warp_keys32 value cases" \
    "$(grep '^PASS warp_keys32\.' "$O/broken.log" | grep -vc '\.plan')"
fi
echo "== memcheck (start ${SECONDS}s)"
timeout "${MEMCHECK_S:-40}" compute-sanitizer --tool memcheck "$P/test_decode_attention" --families-only > "$O/memcheck.log" 2>&1
grep -E "ERROR SUMMARY" "$O/memcheck.log"; echo "memcheck passed $(grep -c '^PASS' "$O/memcheck.log"), failed $(grep -c '^FAIL' "$O/memcheck.log")"
finish
exit 0
fi
mkdir -p build/spec_capi
table() {  # NAME LIBRARY LIMIT bench_families args...
  local name=$1 lib=$2 limit=$3; shift 3
  cp "$lib" build/spec_capi/libpvt_spec.so
  run "table_$name" "$limit" python3 tests/gpu/bench_families.py "$O/$name.json" --capi "$@"
}
if [ "$STEP" = rule ]; then
  table all "$P/libpvt_spec.so" 150
  table rule "$P/libpvt_spec.so" 90 --only falcon_7b,mqa32 --dtypes fp16 --variants k16,w4k16,k32rt2
  python3 - "$O" <<'PY'
import json, sys
o = sys.argv[1]
v = [r for r in json.load(open(f"{o}/all.json"))["rows"] if "slot_vs_best" in r]
print("TABLE all", len(v), "rows; per slot within 1.05x", sum(r["slot_vs_best"] <= 1.05 for r in v), "1.10x",
      sum(r["slot_vs_best"] <= 1.10 for r in v), "; seq", sum(r["seq_vs_best"] <= 1.05 for r in v),
      sum(r["seq_vs_best"] <= 1.10 for r in v))
for r in v:
    if r["slot_vs_best"] > 1.10:
        print("OVER", r["family"], r["dtype"], r["B"], r["S"], r["Tq"], r["plan_slot"], r["slot_vs_best"], r["seq_vs_best"])
for r in json.load(open(f"{o}/rule.json"))["rows"]:
    var = " | ".join(f"{n} {r[f'ours_slot{n}_us']} {r.get(f'plan_slot{n}')}" for n in ("_k16", "_w4k16", "_k32rt2")
                     if f"ours_slot{n}_us" in r)
    print("RULE", r["family"], r["B"], r["S"], r["plan_slot"], r["ours_slot_us"], "|", var, "| sdpa", r["sdpa_best_us"])
PY
  cp "$O"/*.json "${OUT:-/tmp/out}/" 2>/dev/null
  finish
  exit 0
fi
[ "${BASE:-0}" = 1 ] && table base "$P/libpvt_spec_base.so" 110
table new "$P/libpvt_spec.so" 220 --variants k32,k32b2,k32rt2,k32rt2b2 --min-rows 17
[ "${TABLE_REST:-0}" = 1 ] && table new_rest "$P/libpvt_spec.so" 110 --max-rows 16
[ -f "$P/libpvt_spec_rows5.so" ] && table rows5 "$P/libpvt_spec_rows5.so" 40 --only falcon_7b
cp "$P/libpvt_spec.so" build/spec_capi/libpvt_spec.so
# Issue 32 point 3 on this card: skewed per-slot batches, the plain plan and the balanced rule (these kernels).
run mixed 70 python3 tests/gpu/bench_mixed.py "$O/mixed.json" --capi
python3 - "$O/mixed.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print("MIXED", *(r.get(k) for k in ("family", "B", "lens_mean")), {k: v for k, v in r.items() if k.startswith("pct_copy")})
PY
python3 - "$O" <<'PY'
import json, os, sys
o = sys.argv[1]
tabs = {}
for t in ("base", "new", "new_rest", "rows5"):
    if os.path.exists(f"{o}/{t}.json"):
        tabs[t] = {(r["family"], r["dtype"], r["B"], r["S"], r["Tq"]): r for r in json.load(open(f"{o}/{t}.json"))["rows"]
                   if "slot_vs_best" in r}
if "new_rest" in tabs:
    tabs.setdefault("new", {}).update(tabs.pop("new_rest"))
for t, rs in tabs.items():
    v = list(rs.values())
    print("TABLE", t, len(v), "rows; per slot within 1.05x", sum(r["slot_vs_best"] <= 1.05 for r in v), "1.10x",
          sum(r["slot_vs_best"] <= 1.10 for r in v), "; seq", sum(r["seq_vs_best"] <= 1.05 for r in v),
          sum(r["seq_vs_best"] <= 1.10 for r in v))
for k, r in sorted(tabs.get("new", {}).items()):
    var = {n: r[f"ours_slot{n}_us"] for n in ("_k32", "_k32b2", "_k32rt2", "_k32rt2b2") if f"ours_slot{n}_us" in r}
    if var:
        n, us = min(var.items(), key=lambda x: x[1])
        b = tabs.get("base", {}).get(k, {}).get("ours_slot_us")
        print("K32", *k, r["plan_slot"], "own", r["ours_slot_us"], "base", b, "best", n, us, r.get(f"plan_slot{n}"),
              f"{us / r['ours_slot_us']:.3f}", "sdpa", r["sdpa_best_us"], f"{us / r['sdpa_best_us']:.3f}",
              "err", max((v for x, v in r.items() if x.startswith("err_ours_slot_k32")), default=None))
for k, r in sorted(tabs.get("rows5", {}).items()):
    b = tabs.get("base", tabs.get("new", {})).get(k)
    if b:
        print("ROWS5", *k, r["plan_slot"], "base", b["ours_slot_us"], "rows5", r["ours_slot_us"],
              f"{r['ours_slot_us'] / b['ours_slot_us']:.3f}")
PY
cp "$O"/*.json "${OUT:-/tmp/out}/" 2>/dev/null
finish
