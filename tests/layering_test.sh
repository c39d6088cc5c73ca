#!/usr/bin/env bash
# runtime/'s wings depend one way, downwards: runtime/README.md states their order ("Order, bottom to
# top: ..."); every folder of runtime/ is a wing in that list and every listed wing exists; no
# source file sits in runtime/ itself; a file of wing W includes headers of W, of wings before W
# and of kernels/ only, and every runtime header it names exists; kernels/ (its top level and its
# family folders, conv/, gpt/, ...) includes nothing from runtime/. A break names the file, the line
# and both wings. The check first runs on a fixture tree holding each kind of break (one in a family
# folder of kernels/ too) and must refuse it, so a broken pattern cannot pass silently.
# ctest sets LOCKSTEP_SRC (the source tree).
set -u

src="${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}"
. "$(dirname "$0")/helpers/e2e.sh"

# check_layering ROOT: prints one line per break under ROOT; sets `checked` to the number of
# runtime includes looked at. Non-zero when anything is broken.
check_layering() {
  local root=$1 line order w dir file inc target n=0 bad=0
  checked=0
  line=$(grep -m1 '^Order, bottom to top:' "$root/runtime/README.md" 2>/dev/null) ||
    { echo "runtime/README.md: no line 'Order, bottom to top: ...'"; return 1; }
  declare -A rank=()
  IFS=', ' read -r -a order <<<"${line#Order, bottom to top:}"
  for w in "${order[@]}"; do
    [[ -n $w ]] || continue
    rank[$w]=$((n++))
    [[ -d $root/runtime/$w ]] || { echo "runtime/README.md lists the wing $w, which has no folder"; bad=1; }
  done
  for dir in "$root"/runtime/*/; do
    w=$(basename "$dir")
    [[ -n ${rank[$w]+x} ]] || { echo "runtime/$w/ is not a wing listed in runtime/README.md"; bad=1; }
  done
  for file in "$root"/runtime/*.{h,cpp,cu,cuh}; do
    [[ -e $file ]] && { echo "${file#"$root"/}: sources live in a wing's folder, not runtime/ itself"; bad=1; }
  done
  while IFS=: read -r file lineno inc; do
    target=${inc#*\"}
    target=${target%%\"*}
    checked=$((checked + 1))
    [[ -f $root/$target ]] || { echo "${file#"$root"/}:$lineno: includes $target, which does not exist"; bad=1; }
    if [[ $file == "$root"/kernels/* ]]; then
      echo "${file#"$root"/}:$lineno: kernels/ includes $target from runtime/"
      bad=1
      continue
    fi
    local from=${file#"$root"/runtime/}
    from=${from%%/*}
    local to=${target#runtime/}
    to=${to%%/*}
    [[ -n ${rank[$from]+x} && -n ${rank[$to]+x} ]] || continue
    if ((rank[$to] > rank[$from])); then
      echo "${file#"$root"/}:$lineno: wing $from includes $target from wing $to, which sits above it"
      bad=1
    fi
  done < <(grep -rnE '^#include "runtime/' "$root/runtime" "$root/kernels" \
             --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh')
  return $bad
}

e2e_workdir layering
fixture=$work/tree
mkdir -p "$fixture/runtime/low" "$fixture/runtime/high" "$fixture/runtime/stray" "$fixture/kernels/fam"
printf 'Order, bottom to top: low, high, gone\n' >"$fixture/runtime/README.md"
printf '#include "runtime/low/a.h"\n' >"$fixture/runtime/high/b.h"
printf '#include "runtime/high/b.h"\n#include "runtime/low/missing.h"\n' >"$fixture/runtime/low/a.h"
printf '#include "runtime/low/a.h"\n' >"$fixture/kernels/k.h"
printf '// a family folder\n#include "runtime/low/a.h"\n' >"$fixture/kernels/fam/f.cu"
printf '// loose\n' >"$fixture/runtime/loose.cpp"

out=$(check_layering "$fixture")
[[ $? -ne 0 ]] || fail "the fixture's breaks were not refused: $out"
for want in "runtime/low/a.h:1: wing low includes runtime/high/b.h from wing high" \
            "runtime/low/a.h:2: includes runtime/low/missing.h, which does not exist" \
            "kernels/k.h:1: kernels/ includes runtime/low/a.h" \
            "kernels/fam/f.cu:2: kernels/ includes runtime/low/a.h" \
            "lists the wing gone, which has no folder" \
            "runtime/stray/ is not a wing" \
            "runtime/loose.cpp: sources live in a wing"; do
  grep -qF "$want" <<<"$out" || fail "the fixture's break '$want' was not named: $out"
done
grep -q "runtime/high/b.h:" <<<"$out" && fail "an include downwards was reported: $out"

check_layering "$src" >"$work/src.out" || fail "runtime/ breaks its layering:
$(cat "$work/src.out")"
[[ $checked -gt 100 ]] || fail "only $checked runtime includes found under $src: the pattern no longer matches the code's"

[[ $failures -eq 0 ]] && echo "layering_test: $checked runtime includes, all downwards"
exit $((failures > 0))
