# What the scripts that build a copy of the sources broken on purpose share (source it from the repository
# root): copy_sources BUILD (the working tree's custom_ops and tests/native, uncommitted edits included, into
# BUILD/src); edit_once FILE FROM TO (exactly one line of FILE holds the fixed text FROM, which becomes TO; else
# the script stops); build_copy BUILD TARGET [cmake args...] (the copy's native harness TARGET built into BUILD,
# the log in BUILD.cmake.log).
copy_sources() {
  local src=$1/src
  rm -rf "$src" && mkdir -p "$src/tests" && cp -r custom_ops "$src/" && cp -r tests/native "$src/tests/"
}
edit_once() {
  local f=$1 n
  n=$(grep -cF -- "$2" "$f" || true)
  [ "$n" = 1 ] || { echo "$(basename "$0"): '$2' found $n times in $f" >&2; exit 1; }
  FROM=$2 TO=$3 python3 -c 'import os, sys; p = sys.argv[1]; s = open(p).read(); open(p, "w").write(s.replace(os.environ["FROM"], os.environ["TO"]))' "$f"
}
build_copy() {
  local build=$1 target=$2
  shift 2
  cmake -S "$build/src/tests/native" -B "$build" -DPVT_WITH_CUDA=ON -G Ninja "$@" > "$build.cmake.log"
  cmake --build "$build" --target "$target" >> "$build.cmake.log"
}
