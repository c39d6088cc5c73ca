#!/usr/bin/env bash
# The README's option table of lockstep-train (the "| group | options |" table under "## Training")
# and `lockstep-train --help` name the same options: every option --help lists is in the table, and
# every --option the table names exists in --help. A missing one fails naming it.
# The check first runs on a fixture (a --help with an option the table lacks, a table with an
# option --help lacks) and must fail there naming both, so a broken pattern cannot pass silently.
# ctest sets LOCKSTEP_BIN (the apps build folder) and LOCKSTEP_SRC (the source tree).
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
src="${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-train

# help_options: the long options of a --help text on stdin, one per line, without dashes.
help_options() {
  sed -nE 's/^ +(-[a-zA-Z] \[ )?--([a-z0-9][a-z0-9-]*).*/\2/p' | sort -u
}

# table_options README: the --options named in the README's option table, one per line.
table_options() {
  awk '/^## /{ training = ($0 ~ /^## Training/) }
       training && /^\| group \| options \|/ { table = 1; next }
       table && !/^\|/ { exit }
       table { print }' "$1" |
    grep -oE -- '--[a-z0-9][a-z0-9-]*' | sed 's/^--//' | sort -u
}

# check_options HELP_FILE README: prints each option in one but not the other; non-zero if any.
check_options() {
  local help=$1 readme=$2 in_help in_table opt missing=0
  in_help=$(help_options <"$help")
  in_table=$(table_options "$readme")
  [[ -n $in_help ]] || { echo "no options found in $help"; return 1; }
  [[ -n $in_table ]] || { echo "no '| group | options |' table under '## Training' in $readme"; return 1; }
  for opt in $in_help; do
    grep -qxF -- "$opt" <<<"$in_table" || { echo "--$opt is in --help but not in $readme's option table"; missing=1; }
  done
  for opt in $in_table; do
    grep -qxF -- "$opt" <<<"$in_help" || { echo "--$opt is in $readme's option table but not in --help"; missing=1; }
  done
  return $missing
}

e2e_workdir options-doc
cd "$work" || exit 1

# ---- the check itself can fail ----
cat >fixture-help.txt <<'EOF'
lockstep-train options:

General:
  -h [ --help ]               print this list of options and exit
  --lr arg (=0.001)           peak learning rate
  --fake-option arg (=1)      an option the table lacks
  -v [ --verbose ]            log details
EOF
cat >fixture-readme.md <<'EOF'
## Training: lockstep-train

| group | options |
|---|---|
| general | `--help`, `--lr`, `--verbose` (`-v`), `--lr-schedule` |

## Next section
| group | options |
| x | `--fake-option` |
EOF
out=$(check_options fixture-help.txt fixture-readme.md) &&
  fail "the check passed on a fixture that lacks --fake-option in its table: $out"
grep -q -- '--fake-option is in --help but not' <<<"$out" ||
  fail "the check did not name --fake-option missing from the table: $out"
grep -q -- '--lr-schedule is in .* but not in --help' <<<"$out" ||
  fail "the check did not name --lr-schedule missing from --help: $out"
[[ $(grep -c . <<<"$out") -eq 2 ]] || fail "expected exactly two findings on the fixture: $out"

# ---- the real --help against the real README ----
"$bin/lockstep-train" --help >help.txt 2>&1 || fail "lockstep-train --help exits non-zero"
[[ $(help_options <help.txt | wc -l) -ge 40 ]] ||
  fail "fewer than 40 options read from --help: the pattern no longer matches it"
out=$(check_options help.txt "$src/README.md") || fail "README.md and --help differ: $out"

[[ $failures -eq 0 ]] || exit 1
echo "ok: every option of lockstep-train --help is in README.md's option table, and back"
