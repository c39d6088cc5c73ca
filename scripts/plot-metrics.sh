#!/usr/bin/env bash
# Loss and accuracy curves from lockstep-train metrics files (--metrics, JSON lines), overlaid:
# one PNG with a loss panel (training loss per report as lines, test loss per epoch as points) and,
# for classification, an accuracy panel the same way.
#
#   scripts/plot-metrics.sh -o curves.png 1rank.jsonl 2ranks.jsonl 4ranks.jsonl
#   scripts/plot-metrics.sh -o curves.png "1 rank=m1.jsonl" "2 ranks=m2.jsonl"   (LABEL=FILE)
#
# Needs gnuplot (Debian: gnuplot-nox) and awk. Exit status 2 on bad usage, 1 when gnuplot fails.
set -euo pipefail

usage() { echo "usage: $0 -o OUT.png [--title TEXT] [LABEL=]METRICS.jsonl..." >&2; exit 2; }
out="" title="lockstep-train"
while [[ $# -gt 0 ]]; do
  case $1 in
    -o|--out) [[ $# -ge 2 ]] || usage; out=$2; shift 2 ;;
    --title) [[ $# -ge 2 ]] || usage; title=$2; shift 2 ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) echo "$0: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[[ -n $out && $# -ge 1 ]] || usage
command -v gnuplot >/dev/null || { echo "$0: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/plot-metrics-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Per input: train.N (step loss accuracy) and eval.N (step test_loss test_accuracy), "NaN" where
# a value is missing, so gnuplot skips it.
extract() {
  awk -v train="$2" -v eval="$3" '
    function get(key,   m) {
      if (match($0, "\"" key "\" *: *-?[0-9][0-9.eE+-]*")) {
        m = substr($0, RSTART, RLENGTH); sub(/^[^:]*: */, "", m); return m
      }
      return "NaN"
    }
    /"kind" *: *"train"/ { print get("step"), get("loss"), get("accuracy") > train }
    /"kind" *: *"eval"/  { print get("step"), get("test_loss"), get("test_accuracy") > eval }
  ' "$1"
  touch "$2" "$3"
}

n=0 plots_loss="" plots_acc="" have_acc=0
for arg in "$@"; do
  label=${arg%%=*} file=${arg#*=}
  [[ $arg == *=* ]] || { label=$(basename "$arg"); file=$arg; }
  [[ -r $file ]] || { echo "$0: cannot read $file" >&2; exit 2; }
  n=$((n + 1))
  extract "$file" "$tmp/train.$n" "$tmp/eval.$n"
  [[ -s $tmp/train.$n ]] || { echo "$0: $file has no training reports (\"kind\":\"train\" lines)" >&2; exit 2; }
  awk '$3 != "NaN" { found = 1 } END { exit !found }' "$tmp/train.$n" "$tmp/eval.$n" && have_acc=1
  label=${label//\"/}
  plots_loss+="${plots_loss:+, }'$tmp/train.$n' using 1:2 with lines lw 2 lc $n dt $n title \"$label train\""
  plots_loss+=", '$tmp/eval.$n' using 1:2 with points pt 7 ps 1.2 lc $n title \"$label test\""
  plots_acc+="${plots_acc:+, }'$tmp/train.$n' using 1:3 with lines lw 2 lc $n dt $n title \"$label train\""
  plots_acc+=", '$tmp/eval.$n' using 1:3 with points pt 7 ps 1.2 lc $n title \"$label test\""
done

width=$((have_acc ? 1400 : 760))
{
  echo "set terminal pngcairo size $width,520 noenhanced font ',10'"
  echo "set output '$out'"
  echo "set grid; set key top right; set xlabel 'global step'"
  [[ $have_acc -eq 1 ]] && echo "set multiplot layout 1,2 title \"$title\"" || echo "set title \"$title\""
  echo "set ylabel 'loss'"
  echo "plot $plots_loss"
  if [[ $have_acc -eq 1 ]]; then
    echo "set ylabel 'accuracy'; set key bottom right; set yrange [0:1]"
    echo "plot $plots_acc"
    echo "unset multiplot"
  fi
} >"$tmp/plot.gp"
gnuplot "$tmp/plot.gp" || { echo "$0: gnuplot failed" >&2; exit 1; }
echo "wrote $out"
