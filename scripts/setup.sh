#!/usr/bin/env bash
# Installs the Debian packages Lockstep needs to build, test and run, when they are missing.
# Idempotent and quiet when everything is present. Run as root (or with sudo available).
#   scripts/setup.sh            build + run dependencies
#   scripts/setup.sh --test     also what the test suite needs (Slurm daemons, munge, iproute2)
set -euo pipefail

packages=(cmake make g++ pkg-config openmpi-bin libopenmpi-dev libhdf5-dev hdf5-tools
          libboost-program-options-dev libopenblas-dev libdnnl-dev libgtest-dev zlib1g-dev
          dataset-fashion-mnist)
if [[ "${1:-}" == "--test" ]]; then
  packages+=(slurmctld slurmd slurm-client munge iproute2 gnuplot-nox)
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
