#!/usr/bin/env bash
# The design document's citations resolve: every "DESIGN.md decision <number>" in the source tree
# (also "decisions <a> and <b>", and a citation wrapped over comment lines) names a decision that
# docs/DESIGN.md has as a heading "### <number>. <title>", and every "(DESIGN.md, <section name>)"
# names one of its "##" headings. A missing one fails naming the file, the line and the number.
# The check first runs on a small fixture tree holding citations of a missing decision and section,
# and must fail there naming them, so a broken pattern cannot pass silently.
# ctest sets LOCKSTEP_SRC (the source tree).
set -u

src="${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}"
. "$(dirname "$0")/helpers/e2e.sh"
echo x | grep -qP 'x' 2>/dev/null || { echo "skipped: this grep has no -P (PCRE)"; exit 77; }

# Between the words of a citation: white space, and the comment leaders of a wrapped line.
sep='(?:\s|//|#|\*)'
decision_re="DESIGN\\.md${sep}+decisions?${sep}+\\d+(?:${sep}*(?:,|and|or)${sep}*\\d+)*"
section_re='DESIGN\.md, [A-Za-z][A-Za-z ]*[A-Za-z]'

# check_design_refs ROOT DESIGN: prints "FILE:LINE: ..." for each citation under ROOT that DESIGN
# lacks; sets `cited` to the number of citations seen. Non-zero when any is missing.
check_design_refs() {
  local root=$1 design=$2 file rec offset text line n name missing=0
  cited=0
  [[ -f $design ]] || { echo "$design does not exist"; return 1; }
  while IFS= read -r -d '' file; do
    [[ $file -ef $design ]] && continue
    while IFS= read -r -d '' rec; do
      offset=${rec%%:*}
      text=${rec#*:}
      line=$(($(head -c "$offset" "$file" | tr -cd '\n' | wc -c) + 1))
      while read -r n; do
        cited=$((cited + 1))
        grep -qE "^### $n\\. " "$design" ||
          { echo "${file#"$root"/}:$line: cites DESIGN.md decision $n, which $design does not have"; missing=1; }
      done < <(grep -oE '[0-9]+' <<<"${text#DESIGN.md}")
    done < <(grep -zobP "$decision_re" "$file")
    while IFS= read -r rec; do
      offset=${rec%%:*}
      name=${rec#*:DESIGN.md, }
      line=$(($(head -c "$offset" "$file" | tr -cd '\n' | wc -c) + 1))
      cited=$((cited + 1))
      grep -qiE "^##+ .*$name" "$design" ||
        { echo "${file#"$root"/}:$line: cites the section \"$name\", for which $design has no heading"; missing=1; }
    done < <(grep -obP "$section_re" "$file")
  done < <(grep -rlIZ --exclude-dir=.git --exclude-dir=.device --exclude-dir='build*' 'DESIGN\.md' "$root")
  return $missing
}

e2e_workdir design-refs
fixture=$work/tree
mkdir -p "$fixture/runtime" "$fixture/scripts" "$fixture/docs"
printf '### 1. One\ntext\n### 2. Two\n## Data format\n' >"$fixture/docs/DESIGN.md"
printf '// A thing (DESIGN.md decision %s).\n' 1 >"$fixture/runtime/good.h"
printf '// First line of a comment that wraps its citation (DESIGN.md\n// decisions %s and %s): more.\n' 2 7 \
  >"$fixture/runtime/wrapped.cpp"
printf '#!/bin/sh\n# Files (DESIGN.md, %s) and the wire (DESIGN.md, %s).\n' "data format" "wire protocol" \
  >"$fixture/scripts/tool.sh"

out=$(check_design_refs "$fixture" "$fixture/docs/DESIGN.md")
rc=$?
[[ $rc -ne 0 ]] || fail "the fixture's missing decision and section were not refused: $out"
absent=7  # a variable, so that this script holds no citation itself
grep -q "^runtime/wrapped.cpp:1: cites DESIGN.md decision $absent," <<<"$out" ||
  fail "the wrapped citation of the missing decision 7 is not named with its file and line: $out"
grep -q '^scripts/tool.sh:2: cites the section "wire protocol"' <<<"$out" ||
  fail "the citation of a missing section is not named with its file and line: $out"
grep -q 'good.h\|decision 1,\|decision 2,\|data format' <<<"$out" &&
  fail "a citation that resolves was reported: $out"
check_design_refs "$fixture" "$fixture/docs/DESIGN.md" >/dev/null
[[ $cited -eq 5 ]] || fail "the fixture holds 5 citations (decisions 1, 2, 7, two sections), counted $cited"

out=$(check_design_refs "$src" "$src/docs/DESIGN.md") || fail "citations of docs/DESIGN.md that do not resolve:
$out"
check_design_refs "$src" "$src/docs/DESIGN.md" >/dev/null
[[ $cited -gt 0 ]] || fail "no DESIGN.md citation found under $src: the pattern no longer matches the code's"

[[ $failures -eq 0 ]] && echo "design_refs_test: all $cited citations of docs/DESIGN.md resolve"
exit $((failures > 0))
