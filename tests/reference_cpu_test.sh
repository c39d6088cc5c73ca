#!/usr/bin/env bash
# The reference scripts (scripts/reference: the tutorial's CNN in PyTorch and in JAX) run a few
# steps on the CPU and print the lines lockstep-bench train's tables share, so that they still work
# when a GPU run needs them: from a small Lockstep-style HDF5 file (uint8 28x28 images, the norm
# attributes), fp32 with one epoch and its test accuracy, and bf16 and tf32 labelled as asked.
# PyTorch is Debian's (python3-torch, for /usr/bin/python3); JAX comes from PyPI in the venv that
# scripts/setup.sh --test makes in the build folder (LOCKSTEP_REFERENCE_VENV overrides). A
# framework that is not installed is skipped, saying so; with neither, the test is skipped.
# ctest sets LOCKSTEP_BIN and LOCKSTEP_SRC.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
src="${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}"
. "$(dirname "$0")/helpers/e2e.sh"
venv="${LOCKSTEP_REFERENCE_VENV:-$bin/../reference-venv}"

# Each framework's interpreter, or the reason it is missing.
torch_py="" jax_py="" torch_why="" jax_why=""
if [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c "import torch, numpy, h5py" 2>/dev/null; then
  torch_py=/usr/bin/python3
else
  torch_why="PyTorch: /usr/bin/python3 cannot import torch, numpy and h5py"
  torch_why+=" (scripts/setup.sh --test installs python3-torch and python3-h5py)"
fi
if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c "import jax, optax, h5py" 2>/dev/null; then
  jax_py="$venv/bin/python"
else
  jax_why="JAX: $venv cannot import jax, optax and h5py"
  jax_why+=" (scripts/setup.sh --test installs them from PyPI)"
fi
if [[ -z $torch_py && -z $jax_py ]]; then
  echo "skipped: $torch_why; $jax_why"
  exit 77
fi
[[ -n $torch_why ]] && echo "skipped part: $torch_why"
[[ -n $jax_why ]] && echo "skipped part: $jax_why"

e2e_workdir reference
data="$work/images.h5"
maker=${torch_py:-$jax_py}
# 128 training and 32 test images in 10 classes, stored as lockstep-data stores Fashion-MNIST.
"$maker" - "$data" <<'PY' || { echo "FAIL: could not write $data"; exit 1; }
import sys
import h5py
import numpy as np
rng = np.random.default_rng(3)
with h5py.File(sys.argv[1], "w") as f:
    for group, rows in (("train", 128), ("test", 32)):
        labels = rng.integers(0, 10, rows).astype(np.int32)
        images = rng.integers(0, 200, (rows, 28, 28, 1)).astype(np.uint8)
        images[:, ::2, :, 0] += (labels * 5).astype(np.uint8)[:, None, None]
        f.create_dataset(group + "/images", data=images)
        f.create_dataset(group + "/labels", data=labels)
    f.attrs["num_classes"] = 10
    f.attrs["norm_mean"] = 0.4
    f.attrs["norm_std"] = 0.3
PY

# run NAME PYTHON SCRIPT PRECISION EXTRA...: the script's report must have every shared key, its
# header must name the precision, and with --epochs a test accuracy in [0, 1].
run() {
  local name=$1 py=$2 script=$3 precision=$4
  shift 4
  local out rc
  out=$(cd "$work" && PYTHONUNBUFFERED=1 "$py" "$src/scripts/reference/$script" --data "$data" \
    --global-batch 16 --precision "$precision" "$@" 2>&1)
  rc=$?
  echo "--- $name $precision: $*"
  echo "$out" | grep -v '^WARNING' | tail -n 8
  [[ $rc -eq 0 ]] || { fail "$name --precision $precision exited $rc"; return; }
  grep -qE "^# $name .* on .*: cnn, global batch 16, $precision, " <<<"$out" ||
    fail "$name --precision $precision: no header naming the precision"
  for key in samples_per_second step_ms_median flops_per_sample_train achieved_gflops; do
    grep -qE "(^| )$key=[0-9.e+-]+" <<<"$out" || fail "$name --precision $precision: no $key="
  done
  if [[ " $* " == *" --epochs "* ]]; then
    grep -qE "^test_accuracy=(0\.[0-9]+|1\.0+) epochs=1$" <<<"$out" ||
      fail "$name --precision $precision: no test_accuracy in [0, 1] after one epoch"
  fi
}

if [[ -n $torch_py ]]; then
  run PyTorch "$torch_py" cnn_torch.py fp32 --steps 2 --warmup 1 --epochs 1
  run PyTorch "$torch_py" cnn_torch.py bf16 --steps 1 --warmup 0
  run PyTorch "$torch_py" cnn_torch.py tf32 --steps 1 --warmup 0
fi
if [[ -n $jax_py ]]; then
  run JAX "$jax_py" cnn_jax.py fp32 --steps 2 --warmup 1 --epochs 1
  run JAX "$jax_py" cnn_jax.py bf16 --steps 1 --warmup 0
  run JAX "$jax_py" cnn_jax.py tf32 --steps 1 --warmup 0
fi

[[ $failures -eq 0 ]] || { echo "$failures check(s) failed"; exit 1; }
echo "PASS"
