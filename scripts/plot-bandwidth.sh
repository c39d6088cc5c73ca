#!/usr/bin/env bash
# Bus bandwidth against message size from lockstep-bench collectives tables (its stdout), one line
# per collective and backend, log-scaled size axis. Several tables (e.g. 2 and 4 ranks) overlay;
# each is labelled by its file name or LABEL=FILE.
#
#   mpiexec -n 2 lockstep-bench collectives -b 8 -e 64M -f 4 > bench-2.txt
#   scripts/plot-bandwidth.sh -o busbw.png bench-2.txt "4 ranks=bench-4.txt"
#   scripts/plot-bandwidth.sh -o busbw.png --collective all_reduce bench-2.txt
#
# Needs gnuplot (Debian: gnuplot-nox) and awk. Exit status 2 on bad usage, 1 when gnuplot fails.
set -euo pipefail

usage() { echo "usage: $0 -o OUT.png [--collective NAME] [--title TEXT] [LABEL=]TABLE.txt..." >&2; exit 2; }
out="" only="" title="lockstep-bench collectives: bus bandwidth"
while [[ $# -gt 0 ]]; do
  case $1 in
    -o|--out) [[ $# -ge 2 ]] || usage; out=$2; shift 2 ;;
    --collective) [[ $# -ge 2 ]] || usage; only=$2; shift 2 ;;
    --title) [[ $# -ge 2 ]] || usage; title=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "$0: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[[ -n $out && $# -ge 1 ]] || usage
command -v gnuplot >/dev/null || { echo "$0: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/plot-bandwidth-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

plots="" n=0 series=0
for arg in "$@"; do
  label=${arg%%=*} file=${arg#*=}
  [[ $arg == *=* ]] || { label=$(basename "$arg"); file=$arg; }
  [[ -r $file ]] || { echo "$0: cannot read $file" >&2; exit 2; }
  n=$((n + 1))
  # "# backend mpi (...)" starts a backend, "# all_reduce   busbw = ..." a collective; data rows
  # are "size count type redop root min avg max algbw busbw #wrong". One file per series.
  awk -v dir="$tmp" -v n="$n" -v only="$only" '
    /^# backend / { backend = $3; next }
    /^# [a-z_]+ +busbw =/ { coll = $2; next }
    /^#/ { next }
    NF == 11 && $1 ~ /^[0-9]+$/ && coll != "" && (only == "" || only == coll) {
      f = dir "/s." n "." backend "." coll
      if (!(f in seen)) { seen[f] = 1; print f > (dir "/list." n) }
      print $1, $10 > f
    }
  ' "$file"
  [[ -s $tmp/list.$n ]] || { echo "$0: $file holds no lockstep-bench collectives table${only:+ for $only}" >&2; exit 2; }
  while read -r f; do
    series=$((series + 1))
    name=${f##*/s.$n.}
    plots+="${plots:+, }'$f' using 1:2 with linespoints lw 2 pt 7 title \"${label//\"/} ${name/./ }\""
  done <"$tmp/list.$n"
done

{
  echo "set terminal pngcairo size 1000,600 noenhanced font ',10'"
  echo "set output '$out'"
  echo "set title \"$title\""
  echo "set logscale x 2; set grid; set key top left"
  echo "set format x '%.0b%B'"
  echo "set xlabel 'message size (bytes)'; set ylabel 'bus bandwidth (GB/s)'"
  echo "plot $plots"
} >"$tmp/plot.gp"
gnuplot "$tmp/plot.gp" || { echo "$0: gnuplot failed" >&2; exit 1; }
echo "wrote $out ($series series)"
