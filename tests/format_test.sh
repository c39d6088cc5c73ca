#!/usr/bin/env bash
# Every tracked C++ and CUDA file (*.cpp, *.h, *.cu, *.cuh) is as clang-format 14 writes it with
# the project's .clang-format (Google's style at 100 columns): a file that is not fails, named,
# with the first lines clang-format would change. Skipped (exit 77, saying so) where clang-format-14
# is not installed (scripts/setup.sh --test installs it) or the tree is not a git checkout.
# The check first runs on a badly formatted file, which it must refuse.
set -u
src="${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_commands clang-format-14 git
cd "$src" || exit 1
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "skipped: $src is not a git checkout"; exit 77; }

e2e_workdir format
printf 'int  main( ) {return 0 ;}\n' >"$work/bad.cpp"
cp .clang-format "$work/"
clang-format-14 --dry-run -Werror "$work/bad.cpp" >/dev/null 2>&1 &&
  fail "clang-format-14 passed a badly formatted file: the check cannot fail"

mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.inc' '*.cu' '*.cuh')
[[ ${#files[@]} -gt 100 ]] || fail "only ${#files[@]} C++ files tracked"
bad=()
for f in "${files[@]}"; do
  clang-format-14 --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [[ ${#bad[@]} -gt 0 ]]; then
  clang-format-14 --dry-run "${bad[0]}" 2>&1 | head -20
  fail "${#bad[@]} file(s) not as clang-format-14 writes them (clang-format-14 -i FILE): ${bad[*]}"
fi
echo "format_test: ${#files[@]} files as clang-format-14 writes them"
