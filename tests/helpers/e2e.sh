# Sourced by the end-to-end test scripts (tests/*_test.sh): a counter of failed checks with fail(),
# e2e_refused and e2e_finish over it, and e2e_workdir TAG, which makes a private work folder ($work)
# removed when the script exits.
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# e2e_refused WHAT PATTERN COMMAND...: COMMAND (one process, or an mpiexec line) must exit 2 and
# print PATTERN; a line says so, else fail() names what it did. Its output stays in $out.
e2e_refused() {
  local what=$1 expect=$2 rc
  shift 2
  out=$(timeout 60 "$@" 2>&1)
  rc=$?
  if [[ $rc -ne 2 ]] || ! grep -q -- "$expect" <<<"$out"; then
    fail "$what: exit $rc (expected 2 and '$expect'): $out"
  else
    echo "ok: $what refused: $(grep -m1 '^error' <<<"$out")"
  fi
}

# e2e_finish NAME: exit 1 naming the count when a check failed, else say NAME passed.
e2e_finish() {
  if [[ $failures -gt 0 ]]; then
    echo "$failures failure(s)"
    exit 1
  fi
  echo "$1: all passed"
}

e2e_workdir() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/lockstep-$1-XXXXXX") || exit 1
  trap 'rm -rf "$work"' EXIT
}

# e2e_require_apps NAME...: skipped (exit 77, with the reason) unless $bin/NAME is built, for each.
e2e_require_apps() {
  local app
  for app in "$@"; do
    [[ -x $bin/$app ]] || { echo "skipped: $bin/$app is not built"; exit 77; }
  done
}

# e2e_require_commands CMD...: skipped unless each command is on PATH.
e2e_require_commands() {
  local cmd
  for cmd in "$@"; do
    command -v "$cmd" >/dev/null || { echo "skipped: $cmd is not installed"; exit 77; }
  done
}

# e2e_require_torch_and PROGRAM: skipped unless Debian's /usr/bin/python3 imports torch, numpy and
# h5py (the PyTorch comparisons) and PROGRAM, the test's dump helper, is built.
e2e_require_torch_and() {
  if ! /usr/bin/python3 -c 'import torch, numpy, h5py' 2>/dev/null; then
    echo "skipped: /usr/bin/python3 cannot import torch, numpy and h5py" \
         "(scripts/setup.sh --test installs python3-torch and python3-h5py)"
    exit 77
  fi
  [[ -x $1 ]] || { echo "skipped: $1 is not built"; exit 77; }
}

# e2e_wait_for_checkpoint DIR: waits until the first checkpoint in DIR shows a run is under way;
# non-zero after 60 s without one.
e2e_wait_for_checkpoint() {
  for _ in $(seq 600); do
    compgen -G "$1/ckpt-*.h5" >/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# e2e_small_fashion_mnist DATA_APP OUT TRAIN TEST: OUT, a Fashion-MNIST HDF5 file made by DATA_APP
# (a lockstep-data) from the first TRAIN training and TEST test records of Debian's IDX files, for a
# model that must train in seconds. Returns 77, saying why, when the IDX files are not installed.
e2e_small_fashion_mnist() {
  local data_app=$1 out=$2 idx=/usr/share/datasets/fashion-mnist small name rows dims record
  [[ -e $idx/train-images-idx3-ubyte.gz ]] ||
    { echo "skipped: no Fashion-MNIST IDX files in $idx (dataset-fashion-mnist)"; return 77; }
  small=$(mktemp -d "$(dirname "$out")/idx-XXXXXX") || return 1
  for name in train-images-idx3-ubyte:$3 train-labels-idx1-ubyte:$3 t10k-images-idx3-ubyte:$4 \
              t10k-labels-idx1-ubyte:$4; do
    rows=${name#*:}
    name=${name%:*}
    if [[ $name == *images* ]]; then dims=2 record=784; else dims=0 record=1; fi
    # The magic, the count rewritten to ROWS, the other dimensions, the first ROWS records.
    {
      zcat "$idx/$name.gz" | head -c 4
      printf "$(printf '\\x%02x' $((rows >> 24 & 255)) $((rows >> 16 & 255)) $((rows >> 8 & 255)) \
                $((rows & 255)))"
      zcat "$idx/$name.gz" | tail -c +9 | head -c $((dims * 4 + rows * record))
    } >"$small/$name"
  done
  "$data_app" fashion-mnist --source "$small" --out "$out" >/dev/null 2>&1 ||
    { echo "FAIL: lockstep-data fashion-mnist --source $small"; return 1; }
}

# e2e_rank_pid JOB RANK: the process of MPI rank RANK among the descendants of JOB (e.g. the pid of
# `timeout ... mpiexec ...` started in the background), found by its OMPI_COMM_WORLD_RANK. Reads
# /proc alone (a GPU image may lack procps), at any depth (a launcher may start ranks through a
# daemon or a wrapper).
e2e_rank_pid() {
  local pid
  for pid in $(awk -v p="$1" '/^PPid:/ && $2 == p { split(FILENAME, f, "/"); print f[3] }' \
                 /proc/[0-9]*/status 2>/dev/null); do
    if grep -qz "^OMPI_COMM_WORLD_RANK=$2\$" "/proc/$pid/environ" 2>/dev/null; then
      echo "$pid"
    else
      e2e_rank_pid "$pid" "$2"
    fi
  done
}
