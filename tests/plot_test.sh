#!/usr/bin/env bash
# scripts/plot-metrics.sh and scripts/plot-bandwidth.sh: PNGs from two small metrics files (one
# with accuracy, one regression-style without) and a lockstep-bench collectives table; each output
# exists and starts with the PNG signature; inputs with nothing to plot are refused.
# Skipped (77) without gnuplot. ctest sets LOCKSTEP_SRC.
set -u

src="${LOCKSTEP_SRC:-$(cd "$(dirname "$0")/.." && pwd)}"
command -v gnuplot >/dev/null || { echo "skipped: gnuplot is not installed (gnuplot-nox)"; exit 77; }

. "$(dirname "$0")/helpers/e2e.sh"
e2e_workdir plot
cd "$work" || exit 1

is_png() { [[ -s $1 ]] && [[ $(head -c 8 "$1" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]]; }

# Two runs the way lockstep-train --metrics writes them (1 and 2 ranks), straggler lines included.
for r in 1 2; do
  for s in 10 20 30 40; do
    echo "{\"kind\":\"train\",\"step\":$s,\"epoch\":1,\"loss\":$(awk -v s=$s -v r=$r 'BEGIN{print 2.3/(1+s/(10*r))}'),\"accuracy\":0.$((s + r)),\"lr\":0.001,\"samples_per_sec\":900,\"data_wait_share\":0.01}"
  done >"m$r.jsonl"
  echo "{\"kind\": \"straggler\", \"step\": 40, \"window_steps\": 40, \"slowest_rank\": 0, \"spread\": 0.1, \"median_compute_s\": 0.01, \"step_s\": [0.01], \"compute_s\": [0.01]}" >>"m$r.jsonl"
  echo "{\"kind\":\"eval\",\"step\":40,\"epoch\":1,\"train_loss\":0.9,\"train_accuracy\":0.6,\"test_loss\":0.8,\"test_accuracy\":0.7,\"epoch_seconds\":1,\"samples_per_sec\":900}" >>"m$r.jsonl"
done
printf '%s\n' '{"kind":"train","step":5,"epoch":1,"loss":4.5,"lr":0.001,"samples_per_sec":1,"data_wait_share":0}' \
  '{"kind":"train","step":10,"epoch":1,"loss":3.5,"lr":0.001,"samples_per_sec":1,"data_wait_share":0}' >reg.jsonl

cat >coll.txt <<'TABLE'
# lockstep-bench collectives: 2 rank(s), dtype float32, op sum, root 0
#
# backend mpi (host buffers)
#
# all_reduce   busbw = algbw x 2(n-1)/n (n = 2)
#      size(B)        count      type  redop  root     min(us)     avg(us)     max(us)  algbw(GB/s)  busbw(GB/s)  #wrong
             8            2   float32    sum     -         6.8         6.9         7.0        0.001        0.001       0
          4096         1024   float32    sum     -        14.8        14.9        15.0        0.275        0.275       0
        262144        65536   float32    sum     -       240.7       241.8       242.9        1.084        1.084       0
# all_reduce: average busbw 0.410 GB/s over 3 sizes
#
# broadcast   busbw = algbw x 1 (n = 2)
#      size(B)        count      type  redop  root     min(us)     avg(us)     max(us)  algbw(GB/s)  busbw(GB/s)  #wrong
             8            2   float32      -     0         6.9         9.1        11.3        0.001        0.001       0
        262144        65536   float32      -     0       138.3       138.4       138.5        1.894        1.894       0
TABLE

"$src/scripts/plot-metrics.sh" -o curves.png "1 rank=m1.jsonl" "2 ranks=m2.jsonl" >log.txt 2>&1 ||
  fail "plot-metrics.sh exits $?: $(cat log.txt)"
is_png curves.png || fail "curves.png is missing or not a PNG"
"$src/scripts/plot-metrics.sh" -o reg.png reg.jsonl >log.txt 2>&1 || fail "plot-metrics.sh without accuracy exits $?"
is_png reg.png || fail "reg.png is missing or not a PNG"
"$src/scripts/plot-bandwidth.sh" -o busbw.png coll.txt >log.txt 2>&1 || fail "plot-bandwidth.sh exits $?: $(cat log.txt)"
is_png busbw.png || fail "busbw.png is missing or not a PNG"
grep -q "2 series" log.txt || fail "expected 2 series (all_reduce, broadcast): $(cat log.txt)"
"$src/scripts/plot-bandwidth.sh" -o ar.png --collective all_reduce coll.txt >log.txt 2>&1 && grep -q "1 series" log.txt ||
  fail "--collective all_reduce does not give 1 series: $(cat log.txt)"

# Nothing to plot: refused with exit status 2 and no PNG.
"$src/scripts/plot-bandwidth.sh" -o none.png m1.jsonl >/dev/null 2>&1
[[ $? -eq 2 && ! -e none.png ]] || fail "a file without a table is not refused with status 2"
"$src/scripts/plot-metrics.sh" -o none.png coll.txt >/dev/null 2>&1
[[ $? -eq 2 && ! -e none.png ]] || fail "a file without training reports is not refused with status 2"

[[ $failures -eq 0 ]] && echo "plot_test: all checks passed"
exit $((failures > 0))
