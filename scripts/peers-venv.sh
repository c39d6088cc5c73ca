#!/usr/bin/env bash
# The speed peers: today's PyTorch and JAX releases from PyPI (with h5py and numpy) in a venv of
# Debian's python3 at ${LOCKSTEP_BUILD_DIR:-build}/peers-venv, for the side-by-side figures
# (scripts/reference/side_by_side_cpu.sh uses it by default). Debian's python3-torch (1.13, 2022)
# stays for the correctness tests in CI; a ratio against it is labelled as such, never claimed.
#   bash scripts/peers-venv.sh [--upgrade]
# Idempotent: an existing venv that imports torch, jax and h5py is kept unless --upgrade. Prints
# the peers' versions, the CPU model and its widest vector ISA (AVX-512 or AVX2), and the date,
# which every figure measured against them names. Exit 1 when PyPI cannot be reached.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${LOCKSTEP_BUILD_DIR:-$root/build}/peers-venv
upgrade=""
case ${1:-} in
  --upgrade) upgrade=--upgrade ;;
  "") ;;
  *) echo "usage: peers-venv.sh [--upgrade]" >&2; exit 2 ;;
esac
if [[ -n $upgrade ]] || ! "$venv/bin/python" -c "import torch, jax, h5py" 2>/dev/null; then
  echo "peers-venv: installing torch, jax[cpu], h5py and numpy from PyPI into $venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check $upgrade torch "jax[cpu]" h5py numpy ||
    { echo "peers-venv: pip could not install the peers (no PyPI?)" >&2; exit 1; }
fi
bash "$root/scripts/reference/machine.sh"
"$venv/bin/python" -c "import torch, jax; print(f'peers: torch {torch.__version__}, jax {jax.__version__} ($0)')" \
  "$venv/bin/python"
