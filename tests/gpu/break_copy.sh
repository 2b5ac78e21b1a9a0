# Sourced by the break_*.sh scripts: break_copy BUILD_DIR FILE LINE EDIT [cmake args...] copies the working
# tree's kernels and native tests (uncommitted edits included) to BUILD_DIR/src, applies the sed edit EDIT to
# FILE there (a path under custom_ops/ or tests/native/; LINE: the fixed text the edit must find), refusing
# where LINE is missing or the edit changes nothing, and builds that copy's test_decode_attention in BUILD_DIR
# (cmake's output to BUILD_DIR.cmake.log). tar keeps the files' times, so a rebuild compiles only what changed.
break_copy() {
  local build=$1 file=$2 line=$3 edit=$4
  shift 4
  local src=$build/src
  rm -rf "$src" && mkdir -p "$src"
  tar -cf - custom_ops tests/native | tar -xf - -C "$src"
  local f=$src/$file
  grep -qF "$line" "$f" || { echo "break_copy: no line '$line' in $file" >&2; return 1; }
  local before
  before=$(md5sum < "$f")
  sed -i "$edit" "$f"
  [ "$(md5sum < "$f")" != "$before" ] || { echo "break_copy: the edit of $file did not apply" >&2; return 1; }
  cmake -S "$src/tests/native" -B "$build" -DPVT_WITH_CUDA=ON -G Ninja "$@" > "$build.cmake.log"
  cmake --build "$build" --target test_decode_attention >> "$build.cmake.log"
}
