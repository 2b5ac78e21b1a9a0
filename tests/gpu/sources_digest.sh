#!/usr/bin/env bash
# One digest of the C++/CUDA sources the native tests and the torch extension build from (the core, the
# kernels, the native harness, the extension's own file), to tell whether prebuilt binaries match a tree.
# Usage (repository root): bash tests/gpu/sources_digest.sh [--files]  (--files: each file's digest)
set -euo pipefail
cd "$(dirname "$0")/../.."
files() {
  find custom_ops/core custom_ops/kernels tests/native tests/gpu/pvt_torch.cu -type f \
    \( -name '*.cc' -o -name '*.cu' -o -name '*.h' -o -name '*.cuh' -o -name CMakeLists.txt \) -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum
}
if [ "${1:-}" = --files ]; then files; else files | sha256sum | cut -c1-16; fi
