#!/usr/bin/env bash
# Configures and builds Lockstep into ${LOCKSTEP_BUILD_DIR:-build}. CUDA parts are built where nvcc
# and NCCL are found (LOCKSTEP_CUDA=AUTO); set LOCKSTEP_CUDA=OFF or ON to force.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LOCKSTEP_BUILD_DIR:-$root/build}
jobs=${LOCKSTEP_JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_CUDA="${LOCKSTEP_CUDA:-AUTO}" >/dev/null
cmake --build "$build" -j "$jobs"
