#!/usr/bin/env bash
# The README's first command: from a fresh Debian 12 machine to a trained model.
#   bash scripts/quickstart.sh [cnn] [lockstep-train args...]   the CNN on Fashion-MNIST
#   bash scripts/quickstart.sh gpt [lockstep-train args...]     the tiny GPT on the licences corpus
#   1. installs the Debian packages that are missing (scripts/setup.sh, idempotent);
#   2. configures and builds into build/ (CUDA parts where nvcc and NCCL exist: LOCKSTEP_CUDA=AUTO);
#   3. prepares the data unless it is there already: Fashion-MNIST in data/fashion-mnist.h5, or the
#      texts of /usr/share/common-licenses as 128-byte sequences in data/licenses.h5;
#   4. trains on 2 MPI ranks and prints the test accuracy; the GPT (gpt:tiny, AdamW with warm-up and
#      cosine decay, a few minutes on two cores) also its test bits per byte, then writes a sample
#      of 300 bytes continuing "The " with lockstep-generate from its last checkpoint.
# Environment: QUICKSTART_RANKS (2), QUICKSTART_EPOCHS (3 for the CNN, 12 for the GPT),
# LOCKSTEP_BUILD_DIR (build), LOCKSTEP_JOBS (nproc). Extra arguments go to lockstep-train, e.g.
# --epochs 5 --lr 0.002.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
model=cnn
if [[ ${1:-} == gpt || ${1:-} == cnn ]]; then model=$1; shift; fi
ranks=${QUICKSTART_RANKS:-2}
if [[ $model == gpt ]]; then epochs=${QUICKSTART_EPOCHS:-12}; else epochs=${QUICKSTART_EPOCHS:-3}; fi
build=${LOCKSTEP_BUILD_DIR:-$root/build}

echo "== 1/4 dependencies (scripts/setup.sh)"
bash "$root/scripts/setup.sh"

echo "== 2/4 build ($build)"
LOCKSTEP_BUILD_DIR="$build" bash "$root/scripts/build.sh"

# Open MPI refuses to run as root unless told; oversubscribe lets the ranks share fewer cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

if [[ $model == gpt ]]; then
  echo "== 3/4 data"
  data=$root/data/licenses.h5
  if [[ -f $data ]]; then
    echo "using $data"
  else
    mkdir -p "$root/data"
    "$build/apps/lockstep-data" text --in /usr/share/common-licenses/* --out "$data" --seq-len 128
  fi
  echo "== 4/4 training gpt:tiny on $ranks ranks for $epochs epochs"
  ckpt=$build/quickstart-gpt-ckpt
  mpiexec -n "$ranks" "$build/apps/lockstep-train" --data "$data" --model gpt:tiny \
    --optimizer adamw --weight-decay 0.1 --lr 1e-3 --lr-schedule cosine --warmup-steps 100 \
    --clip-norm 1 --global-batch 32 --epochs "$epochs" --checkpoint-dir "$ckpt" \
    --overwrite-checkpoints "$@" | tee "$build/quickstart.log"
  bpb=$(sed -n 's/^test_bits_per_byte=//p' "$build/quickstart.log" | tail -1)
  echo "== a sample: 300 bytes after \"The \" (lockstep-generate, temperature 0.8, top-k 40)"
  "$build/apps/lockstep-generate" --checkpoint "$ckpt" --prompt "The " --tokens 300 \
    --temperature 0.8 --top-k 40 --seed 1
  echo
  echo "quickstart: gpt:tiny on the licences corpus, $ranks ranks, $epochs epochs: test bits per byte $bpb"
  exit 0
fi

echo "== 3/4 data"
data=$root/data/fashion-mnist.h5
if [[ -f $data ]]; then
  echo "using $data"
else
  mkdir -p "$root/data"
  "$build/apps/lockstep-data" fashion-mnist --out "$data"
fi

echo "== 4/4 training the CNN on $ranks ranks for $epochs epochs"
mpiexec -n "$ranks" "$build/apps/lockstep-train" --data "$data" --model cnn --optimizer adam \
  --lr 0.001 --global-batch 128 --epochs "$epochs" "$@" | tee "$build/quickstart.log"
accuracy=$(sed -n 's/^test_accuracy=//p' "$build/quickstart.log" | tail -1)
echo "quickstart: Fashion-MNIST CNN on $ranks ranks, $epochs epochs: test accuracy $accuracy"
