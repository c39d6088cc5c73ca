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
