#!/usr/bin/env bash
# Compile every CUDA source (the CUDA backend, the kernels, the GPU tests and benchmarks of the native
# harness) with the flags the H200 build uses. Compile only: CI has nvcc but neither a GPU nor libcuda
# to link against. Running them is the H200's job (docs/H200_HARNESS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/cuda-compile
mkdir -p "$out"
CUDA_INC=$(dirname "$(dirname "$(command -v nvcc)")")/include
[ -f "$CUDA_INC/cuda.h" ] || CUDA_INC=/usr/local/cuda/include
# Every loop below runs one compiler per core: xargs exits non-zero when any compile fails, which stops
# the script (set -e).
cc_core=(custom_ops/core/*.cc)
printf '%s\0' "${cc_core[@]}" | xargs -0 -P "$(nproc)" -I{} sh -c 'g++ -std=c++17 -Wall -Wextra -Werror \
  -DPADDLE_VTENSOR_WITH_CUDA -I"$3" -Icustom_ops -c "$1" -o "$2/$(basename "$1").o"' _ {} "$out" "$CUDA_INC"
n=${#cc_core[@]}
cu=(custom_ops/kernels/*.cu tests/native/*.cu)
printf '%s\0' "${cu[@]}" | xargs -0 -P "$(nproc)" -I{} sh -c 'nvcc -std=c++17 -O2 -arch=sm_90 \
  -DPADDLE_VTENSOR_WITH_CUDA -Icustom_ops -Itests/native -Xcompiler=-Wall,-Wextra -c "$1" -o "$2/$(basename "$1").o"' \
  _ {} "$out"
n=$((n + ${#cu[@]}))
echo "compiled $n sources with CUDA enabled (sm_90)"

# The Paddle adapter (custom_ops/paddle/) with CUDA on, as the GPU wheel's build compiles it
# (PADDLE_WITH_CUDA + PADDLE_VTENSOR_WITH_CUDA: device guard, streams, memory-stat updates), against
# the installed paddle's headers. The CPU wheel ships the GPU code paths of those headers, but with
# PADDLE_WITH_CUDA they include the headers of cuBLAS, cuDNN, cuFFT, cuRAND, cuSOLVER and cuSPARSE
# (phi/backends/dynload/*.h), which a bare CUDA toolkit lacks: they are taken from NVIDIA's wheels
# (include/ only, about 8 MB) found in PADDLE_VTENSOR_NVIDIA_WHEELS (default: the machine image's wheel folder),
# or from an installed `nvidia` Python package. Without them this step says so and is skipped.
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
if ! PADDLE_INC=$("$PY" -c "import os, paddle; print(os.path.join(os.path.dirname(paddle.__file__), 'include'))" 2>/dev/null); then
  echo "paddle adapter with CUDA: skipped (no paddle importable by $PY)"
  exit 0
fi
PY_INC=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
hdr="$out/nvidia-headers"
wheels=${PADDLE_VTENSOR_NVIDIA_WHEELS:-/opt/pypi-more/files}
nv_inc=()
for lib in cublas cudnn_cu13 cufft curand cusolver cusparse; do
  whl=$(ls "$wheels"/nvidia_${lib}-*.whl 2>/dev/null | head -1 || true)
  [ -n "$whl" ] && (cd "$out" && mkdir -p nvidia-headers && cd nvidia-headers && unzip -qo "$whl" 'nvidia/*/include/*')
done
site_nv=$("$PY" -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))" 2>/dev/null || true)
for d in "$hdr"/nvidia/*/include ${site_nv:+"$site_nv"/nvidia/*/include}; do
  [ -d "$d" ] && nv_inc+=(-isystem "$d")
done
missing=()
for h in cublasXt.h cudnn.h cufft.h curand.h cusolverDn.h cusparse.h; do
  found=0
  for d in "$CUDA_INC" "$hdr"/nvidia/*/include ${site_nv:+"$site_nv"/nvidia/*/include}; do
    [ -f "$d/$h" ] && found=1 && break
  done
  [ $found = 1 ] || missing+=("$h")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "paddle adapter with CUDA: skipped: paddle's headers with PADDLE_WITH_CUDA need ${missing[*]}," \
       "found neither in $CUDA_INC nor in NVIDIA wheels under $wheels (set PADDLE_VTENSOR_NVIDIA_WHEELS)"
  exit 0
fi
# Paddle's own headers as system headers: their warnings are not ours; ours stay -Werror.
flags=(-std=c++17 -Wall -Wextra -Werror -Wno-unused-parameter -DPADDLE_WITH_CUDA -DPADDLE_VTENSOR_WITH_CUDA
       -isystem "$PADDLE_INC" -isystem "$PADDLE_INC/third_party"
       -isystem "$PADDLE_INC/paddle/phi/api/include/compat"
       -isystem "$PADDLE_INC/paddle/phi/api/include/compat/torch/csrc/api/include"
       -isystem "$PY_INC" -isystem "$CUDA_INC" -isystem "$CUDA_INC/cccl" "${nv_inc[@]}" -Icustom_ops -Ipasses)
# Paddle's headers once, as a precompiled header (every adapter source includes paddle/extension.h; parsing
# it is most of each compile): 13 s a source without it, 5 with it (2 cores). A PCH that does not match the
# flags is skipped by g++, which then reads the headers as usual.
mkdir -p "$out/pch"
echo '#include "paddle/extension.h"' > "$out/pch/pvt_paddle.h"
g++ "${flags[@]}" -x c++-header "$out/pch/pvt_paddle.h" -o "$out/pch/pvt_paddle.h.gch"
adapter=(custom_ops/paddle/*.cc)
# Syntax only: parsing and template instantiation find what this check is for (the CUDA code paths of the
# adapter against paddle's headers); the CPU build compiles the same sources to objects. 2.2-2.7 s a source
# against 4.9-6.2 with code generation (2 cores).
printf '%s\0' "${adapter[@]}" | xargs -0 -P "$(nproc)" -I{} sh -c 'src=$1; dst=$2; shift 2; \
  g++ "$@" -include "$dst/pch/pvt_paddle.h" -fsyntax-only "$src"' _ {} "$out" "${flags[@]}"
m=${#adapter[@]}
echo "checked $m paddle adapter sources (syntax and templates) with PADDLE_WITH_CUDA and PADDLE_VTENSOR_WITH_CUDA against $PADDLE_INC"
