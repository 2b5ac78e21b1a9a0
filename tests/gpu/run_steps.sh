# Sourced by the one-call device scripts (run_mixed.sh, run_lastmerge.sh) with `pre` (a prebuild_mixed.sh
# folder) and `out` set, from the repository root: unpacks the binaries, puts libpvt_spec.so where pvt_capi.py
# loads it, records the machine, and defines step NAME LIMIT_S command...: the command's output to
# OUT/NAME.txt under its own time limit (a slow step leaves the others their time), its rc, time, FAIL lines
# and last line printed.
mkdir -p "$out" build/spec_capi
tar -xJf "$pre/bins.tar.xz" -C "$pre"
cp "$pre/libpvt_spec.so" build/spec_capi/
step() {
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  echo "== $name: rc $? in $((SECONDS - t0)) s: $(grep -c '^FAIL' "$out/$name.txt") FAIL lines; $(tail -1 "$out/$name.txt" | cut -c1-160)"
}
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv; } > "$out/machine.txt" 2>&1
