#!/usr/bin/env bash
# runtime/'s wings depend one way, downwards: runtime/README.md states their order ("Order, bottom to
# top: ..."); every folder of runtime/ is a wing in that list and every listed wing exists; no
# source file sits in runtime/ itself; a file of wing W includes headers of W, of wings before W
# and of kernels/ only, and every runtime header it names exists; kernels/ (its top level and its
# family folders, conv/, gpt/, ...) includes nothing from runtime/. A break names the file, the line
# and both wings. The check first runs on a fixture tree holding each kind of break (one in a family
# folder of kernels/ too) and must refuse it, so a broken pattern cannot pass silently. Then the size
# limits of issue 32 (files of runtime/ and kernels/, the trainer, kernels/' top level), likewise
# first on a fixture.
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

# check_sizes ROOT: the house's size limits (issue 32): no source under runtime/ or kernels/ over 500
# lines, the trainer's file at most 400, at most 25 entries at kernels/' top level. One line per
# break; non-zero when any.
check_sizes() {
  local root=$1 file n bad=0
  while IFS= read -r file; do
    n=$(wc -l <"$file")
    if [[ $n -gt 500 ]]; then echo "${file#"$root"/}: $n lines, over 500"; bad=1; fi
  done < <(find "$root/runtime" "$root/kernels" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \))
  if [[ -f $root/runtime/train/trainer.cpp ]]; then
    n=$(wc -l <"$root/runtime/train/trainer.cpp")
    if [[ $n -gt 400 ]]; then echo "runtime/train/trainer.cpp: $n lines, over 400"; bad=1; fi
  fi
  n=$(find "$root/kernels" -mindepth 1 -maxdepth 1 | wc -l)
  if [[ $n -gt 25 ]]; then echo "kernels/: $n entries at its top level, over 25"; bad=1; fi
  return $bad
}
sized=$work/sized
mkdir -p "$sized/runtime/train" "$sized/kernels"
seq 501 | sed 's|^|// |' >"$sized/kernels/long.h"
seq 401 | sed 's|^|// |' >"$sized/runtime/train/trainer.cpp"
for i in $(seq 25); do touch "$sized/kernels/k$i.h"; done
out=$(check_sizes "$sized")
[[ $? -ne 0 ]] || fail "the oversized fixture was not refused: $out"
for want in "kernels/long.h: 501 lines, over 500" "runtime/train/trainer.cpp: 401 lines, over 400" \
            "kernels/: 26 entries at its top level, over 25"; do
  grep -qF "$want" <<<"$out" || fail "the size break '$want' was not named: $out"
done
check_sizes "$src" >"$work/sizes.out" || fail "runtime/ or kernels/ over the house's size limits:
$(cat "$work/sizes.out")"

[[ $failures -eq 0 ]] && echo "layering_test: $checked runtime includes, all downwards; sizes within the limits"
exit $((failures > 0))
