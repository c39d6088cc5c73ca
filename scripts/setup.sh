#!/usr/bin/env bash
# Installs the Debian packages Lockstep needs to build, test and run, when they are missing, and,
# where cuDNN 9 is beside CUDA, the cudnn-frontend headers from PyPI (below). Idempotent and quiet
# when everything is present. Run as root (or with sudo available).
#   scripts/setup.sh            build + run dependencies
#   scripts/setup.sh --test     also what the test suite needs (Slurm daemons, munge, iproute2,
#                               PyTorch for the reference scripts, clang-format 14), and JAX's CPU wheels, optax,
#                               h5py and safetensors from PyPI in a venv of Debian's python3 at
#                               ${LOCKSTEP_BUILD_DIR:-build}/reference-venv (without PyPI, the
#                               reference test skips its JAX part and the export test its
#                               safetensors cross-check, saying so)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

packages=(cmake make g++ pkg-config openmpi-bin libopenmpi-dev libhdf5-dev hdf5-tools
          libboost-program-options-dev libopenblas-dev libdnnl-dev libgtest-dev zlib1g-dev
          libdeflate-dev
          dataset-fashion-mnist xz-utils)
# HDF5 filter plugins, so files compressed by h5py and other tools read: LZF, LZ4, bzip2, Blosc,
# Bitshuffle. Debian 12's hdf5-plugin-lzf lacks its liblzf link; bitshuffle's LZF plugin works.
packages+=(hdf5-plugin-lzf hdf5-filter-plugin hdf5-filter-plugin-blosc-serial bitshuffle)
if [[ "${1:-}" == "--test" ]]; then
  packages+=(slurmctld slurmd slurm-client munge iproute2 gnuplot-nox
             python3-torch python3-h5py python3-venv clang-format-14)
fi

# The reference scripts' JAX (CPU wheels) and the safetensors package, from PyPI, in a venv of
# Debian's python3 under the build folder (it needs no root). Not fatal: without PyPI the JAX part
# of the reference test and the export test's safetensors cross-check skip.
reference_venv() {
  local venv="${LOCKSTEP_BUILD_DIR:-$root/build}/reference-venv"
  [[ -x /usr/bin/python3 ]] || return 0
  [[ -x $venv/bin/python ]] && "$venv/bin/python" -c "import jax, optax, h5py, safetensors" 2>/dev/null &&
    return 0
  echo "setup: installing jax[cpu], optax, h5py and safetensors from PyPI into $venv"
  if ! { /usr/bin/python3 -m venv "$venv" &&
         "$venv/bin/python" -m pip install -q --disable-pip-version-check "jax[cpu]" optax h5py safetensors; }
  then
    echo "setup: could not install JAX into $venv; the reference test will skip its JAX part" >&2
  fi
}

# cuDNN's fused attention (kernels/gpt/attention_cudnn.h) is built from NVIDIA's header-only
# cudnn-frontend, which PyPI carries as nvidia-cudnn-frontend: its headers go under
# /usr/local/lib/cudnn-frontend (CMakeLists.txt looks there) where cuDNN 9 is installed beside
# CUDA. Not fatal: without PyPI the bf16 attention keeps its own flash kernels only.
cudnn_frontend_version=1.32.0
cudnn_frontend() {
  local target=/usr/local/lib/cudnn-frontend
  grep -qs '#define CUDNN_MAJOR 9' /usr/local/cuda/include/cudnn_version.h || return 0
  [[ -f $target/include/cudnn_frontend.h ]] && return 0
  local python
  python=$(command -v python3 || true)
  [[ -n $python ]] && "$python" -m pip --version >/dev/null 2>&1 || {
    echo "setup: no pip to install cudnn-frontend; the cuDNN attention will not be built" >&2
    return 0
  }
  echo "setup: installing nvidia-cudnn-frontend $cudnn_frontend_version (headers) into $target"
  local run=()
  [[ $(id -u) -ne 0 ]] && run=(sudo)
  "${run[@]}" env PIP_ROOT_USER_ACTION=ignore "$python" -m pip install -q \
      --disable-pip-version-check --no-deps --target "$target" \
      "nvidia-cudnn-frontend==$cudnn_frontend_version" ||
    echo "setup: could not install cudnn-frontend; the cuDNN attention will not be built" >&2
}

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  cudnn_frontend
  if [[ "${1:-}" == "--test" ]]; then reference_venv; fi
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
cudnn_frontend
if [[ "${1:-}" == "--test" ]]; then reference_venv; fi
echo "setup: done"
