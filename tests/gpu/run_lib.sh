# What the 8-bit H200 run scripts share (source it from one): O, the logs folder under $OUT with machine.txt
# (date, GPU, driver, clock); run NAME LIMIT COMMAND... (NAME.log in O, its first FAIL lines, its pass and fail
# counts and exit code); finish (tars O into $OUT/logs.tgz: the number of files a run returns is capped).
O=${OUT:-/tmp/out}/logs
mkdir -p "$O"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > "$O/machine.txt"
run() {  # name, limit (s), command...
  local name=$1 limit=$2; shift 2
  echo "== $name (start ${SECONDS}s, limit ${limit}s)"
  timeout "$limit" "$@" > "$O/$name.log" 2>&1; local rc=$?
  grep -E "^FAIL" "$O/$name.log" | head -6
  echo "passed $(grep -c '^PASS' "$O/$name.log"), failed $(grep -c '^FAIL' "$O/$name.log"); rc=$rc"
}
finish() {
  echo "total ${SECONDS}s"
  tar czf "$O.tgz" -C "$(dirname "$O")" logs && rm -r "$O"
}
