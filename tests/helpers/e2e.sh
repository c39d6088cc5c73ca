# Sourced by the end-to-end test scripts (tests/*_test.sh): a counter of failed checks with fail(),
# and e2e_workdir TAG, which makes a private work folder ($work) removed when the script exits.
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
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

# e2e_wait_for_checkpoint DIR: waits until the first checkpoint in DIR shows a run is under way;
# non-zero after 60 s without one.
e2e_wait_for_checkpoint() {
  for _ in $(seq 600); do
    compgen -G "$1/ckpt-*.h5" >/dev/null && return 0
    sleep 0.1
  done
  return 1
}
