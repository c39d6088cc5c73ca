#!/usr/bin/env bash
# The README's test command: installs what is missing, builds (CUDA on where nvcc exists), and runs
# the whole suite through ctest. Exits non-zero on any failure.
#   bash scripts/test.sh [extra ctest arguments, e.g. -L mpi or -R loader]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh" --test
bash "$root/scripts/build.sh"
build=${LOCKSTEP_BUILD_DIR:-$root/build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cd "$build"
ctest --output-on-failure --timeout 900 "$@"
