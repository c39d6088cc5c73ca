#!/usr/bin/env bash
# Every public header opens with what it is, its thread-safety and which of its calls are
# collective (issue 19; LevelDB's habit): the comment before `#pragma once` of each
# header that the install puts under include/lockstep/ (runtime/'s and kernels/ headers except
# scripts/package/package.cmake's LOCKSTEP_PRIVATE_HEADERS, apps/train_cli.h and
# scripts/package/version.h.in) says "thread" and "collective" somewhere. A header that does not
# fails, named, with what it lacks. The check first runs on a fixture tree (a header without
# either word, one with both, a private one without) and must refuse exactly the public one
# that lacks them, so a broken pattern cannot pass silently.
# ctest sets LOCKSTEP_SRC (the source tree).
set -u

src="${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}"
. "$(dirname "$0")/helpers/e2e.sh"

# public_headers ROOT: the public headers under ROOT, one path relative to ROOT a line.
public_headers() {
  local root=$1 private
  private=$(sed -n '/^set(LOCKSTEP_PRIVATE_HEADERS/,/)/p' "$root/scripts/package/package.cmake" |
            sed -E 's/set\(LOCKSTEP_PRIVATE_HEADERS//; s/\)//' | tr -s ' \n' '\n' | sed '/^$/d')
  [[ -n $private ]] ||
    { echo "no LOCKSTEP_PRIVATE_HEADERS in scripts/package/package.cmake" >&2; return 1; }
  (cd "$root" && find runtime kernels -name '*.h' && echo apps/train_cli.h &&
     echo scripts/package/version.h.in) | sort | grep -vxF -f <(echo "$private")
}

# check_headers ROOT: prints one line per public header whose opening comment lacks a word; sets
# `checked`. Non-zero when any does.
check_headers() {
  local root=$1 file opening word bad=0 list
  checked=0
  list=$(public_headers "$root") || return 1
  while IFS= read -r file; do
    checked=$((checked + 1))
    grep -qx '#pragma once' "$root/$file" || { echo "$file: no #pragma once"; bad=1; continue; }
    opening=$(sed '/^#pragma once/,$d' "$root/$file" | grep '^//')
    [[ -n $opening ]] || { echo "$file: no opening comment before #pragma once"; bad=1; continue; }
    grep -qi thread <<<"$opening" ||
      { echo "$file: its opening comment does not say its thread-safety (no \"thread\")"; bad=1; }
    grep -qi collective <<<"$opening" ||
      { echo "$file: its opening comment does not say which calls are collective"; bad=1; }
  done <<<"$list"
  return $bad
}

e2e_workdir public-headers
fixture=$work/tree
mkdir -p "$fixture/runtime/base" "$fixture/kernels" "$fixture/apps" "$fixture/scripts/package"
printf 'set(LOCKSTEP_PRIVATE_HEADERS runtime/base/hidden.h\n    kernels/also_hidden.h)\n' \
  >"$fixture/scripts/package/package.cmake"
printf '// A thing.\n#pragma once\n' >"$fixture/runtime/base/bare.h"
printf '// A thing. Thread-safe.\n// No collective calls.\n#pragma once\n' \
  >"$fixture/runtime/base/good.h"
printf '// Hidden.\n#pragma once\n' >"$fixture/runtime/base/hidden.h"
printf '// Hidden.\n#pragma once\n' >"$fixture/kernels/also_hidden.h"
printf '// Twins. Stateless.\n#pragma once\n// collective, thread: too late\n' \
  >"$fixture/kernels/late.h"
printf '// main. Collective. Main thread.\n#pragma once\n' \
  >"$fixture/apps/train_cli.h"
printf '// Version. Macros: thread-safe, no collective calls.\n#pragma once\n' \
  >"$fixture/scripts/package/version.h.in"

check_headers "$fixture" >"$work/fixture.out"
rc=$?
out=$(cat "$work/fixture.out")
[[ $rc -ne 0 ]] || fail "the fixture's bare headers were accepted: $out"
for want in 'runtime/base/bare.h: its opening comment does not say its thread-safety' \
            'runtime/base/bare.h: its opening comment does not say which calls are collective' \
            'kernels/late.h: its opening comment does not say its thread-safety'; do
  grep -qF "$want" <<<"$out" || fail "the fixture's '$want' was not named: $out"
done
grep -qE "good.h|hidden.h|train_cli.h|version.h.in" <<<"$out" &&
  fail "a fixture header that is fine or private was reported: $out"
[[ $checked -eq 5 ]] || fail "the fixture has 5 public headers, $checked were checked"

check_headers "$src" >"$work/src.out" || fail "public headers without thread-safety or collectives:
$(cat "$work/src.out")"
[[ $checked -gt 80 ]] || fail "only $checked public headers found under $src"

[[ $failures -eq 0 ]] &&
  echo "public_headers_test: $checked public headers say their thread-safety and collectives"
exit $((failures > 0))
