#!/usr/bin/env bash
# The README's first command: from a fresh Debian 12 machine to a trained CNN.
#   1. installs the Debian packages that are missing (scripts/setup.sh, idempotent);
#   2. configures and builds into build/ (CUDA parts where nvcc and NCCL exist: LOCKSTEP_CUDA=AUTO);
#   3. converts Fashion-MNIST to data/fashion-mnist.h5 unless it is there already;
#   4. trains the CNN on 2 MPI ranks and prints the test accuracy.
# Environment: QUICKSTART_RANKS (2), QUICKSTART_EPOCHS (3), LOCKSTEP_BUILD_DIR (build),
# LOCKSTEP_JOBS (nproc). Extra arguments go to lockstep-train, e.g. --epochs 5 --lr 0.002.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ranks=${QUICKSTART_RANKS:-2}
epochs=${QUICKSTART_EPOCHS:-3}
build=${LOCKSTEP_BUILD_DIR:-$root/build}

echo "== 1/4 dependencies (scripts/setup.sh)"
bash "$root/scripts/setup.sh"

echo "== 2/4 build ($build)"
LOCKSTEP_BUILD_DIR="$build" bash "$root/scripts/build.sh"

echo "== 3/4 data"
data=$root/data/fashion-mnist.h5
if [[ -f $data ]]; then
  echo "using $data"
else
  mkdir -p "$root/data"
  "$build/apps/lockstep-data" fashion-mnist --out "$data"
fi

echo "== 4/4 training the CNN on $ranks ranks for $epochs epochs"
# Open MPI refuses to run as root unless told; oversubscribe lets the ranks share fewer cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
mpiexec -n "$ranks" "$build/apps/lockstep-train" --data "$data" --model cnn --optimizer adam \
  --lr 0.001 --global-batch 128 --epochs "$epochs" "$@" | tee "$build/quickstart.log"
accuracy=$(sed -n 's/^test_accuracy=//p' "$build/quickstart.log" | tail -1)
echo "quickstart: Fashion-MNIST CNN on $ranks ranks, $epochs epochs: test accuracy $accuracy"
