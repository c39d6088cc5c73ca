#!/usr/bin/env bash
# Faults, end to end with lockstep-train:
#  - a rank killed with kill -9 mid-training: the job ends non-zero within the bound (--timeout plus
#    slack), and the output names the lost rank (mpiexec's notice or our own message);
#  - a rank stalled inside a collective (SIGSTOP, which mpiexec does not notice): every other rank
#    exits non-zero after --timeout with a message naming the collective it waited in, with
#    --zero 2's reduce-scatters too;
#  - a rank stopped (SIGSTOP) while checkpoints are written every step: the job ends within the
#    checkpoint deadline; rank 0 stopped inside a save (test hook) makes rank 1 give up after
#    --checkpoint-timeout, not --timeout, naming the file and the option;
#  - a save on a full disk (a small tmpfs in a private mount namespace): exit 1, "no space left on
#    device" naming the file and the newest good checkpoint, no temporary file left, no HDF5 stack;
#  - the data file cut short while training reads it: exit 1 within seconds, one message naming the
#    file, the dataset and the rows;
#  - a loss that overflows (--lr 1e30): exit 2 with a message naming the step and the last good
#    checkpoint, and no checkpoint holds a NaN or Inf;
#  - --on-nan skip with an update that overflows the parameters: stopped at the 20th skipped step
#    in a row, exit 2;
#  - a NaN in one training row: --on-nan skip skips exactly the step that holds it in each epoch
#    and finishes with a finite model; --on-nan stop refuses the row as it is read, naming it.
# Every run is bounded by `timeout`. ctest sets LOCKSTEP_BIN and MPIEXEC. Needs h5dump and h5import
# (hdf5-tools).
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-train lockstep-data
e2e_require_commands h5dump h5import

e2e_workdir fault
cd "$work" || exit 1

train() {  # train P args...: output in $out, exit status in $rc
  local np=$1
  shift
  out=$(timeout 120 "$mpiexec" -n "$np" --oversubscribe "$bin/lockstep-train" "$@" 2>&1)
  rc=$?
}
# stop_rank1 JOB LOG: stops rank 1 of the mpiexec JOB (SIGSTOP), waits for the job to end, then
# kills the stopped rank; sets rc, took (ms from the stop to the end) and out (LOG's text). Fails
# and returns 1 when rank 1 cannot be found.
stop_rank1() {
  local victim start
  victim=$(e2e_rank_pid "$1" 1)
  if [[ -z $victim ]]; then
    fail "could not find rank 1"
    return 1
  fi
  start=$(date +%s%N)
  kill -STOP "$victim"
  wait "$1"
  rc=$?
  took=$(( ($(date +%s%N) - start) / 1000000 ))
  kill -KILL "$victim" 2>/dev/null
  out=$(cat "$2")
}
# Whether a checkpoint's parameters hold a NaN or Inf.
non_finite() {
  h5dump -b LE -o params.bin -g /params "$1" >/dev/null && od -An -v -f params.bin | grep -Eiq 'nan|inf'
}
# Starts a long 4-rank run in the background (job pid in $job) and waits until it has trained a
# while (its first checkpoint exists).
start_long_run() {
  local dir=$1
  shift
  timeout 120 "$mpiexec" -n 4 --oversubscribe "$bin/lockstep-train" --data long.h5 --model mlp:16 \
    --global-batch 32 --steps 100000 --progress none --checkpoint-every 50 --checkpoint-dir "$dir" \
    "$@" >"$dir.log" 2>&1 &
  job=$!
  e2e_wait_for_checkpoint "$dir"
}

"$bin/lockstep-data" regression --out long.h5 --samples 4000 --features 6 >/dev/null 2>&1 ||
  { echo "FAIL: lockstep-data regression"; exit 1; }

# --- kill -9 of rank 2 mid-training: the job ends, non-zero, within the bound ---
timeout_s=10
start_long_run killed --timeout $timeout_s || fail "the run to kill never wrote its first checkpoint"
victim=$(e2e_rank_pid "$job" 2)
if [[ -z $victim ]]; then
  fail "could not find rank 2"
else
  start=$(date +%s%N)
  kill -9 "$victim"
  wait "$job"
  rc=$?
  took=$(( ($(date +%s%N) - start) / 1000000 ))
  out=$(cat killed.log)
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "after kill -9 of rank 2 the job exited $rc"$'\n'"$out"
  [[ $took -le $(( (timeout_s + 15) * 1000 )) ]] || fail "the job took ${took} ms to end after kill -9"
  grep -Eq "rank 2 .*(signal 9|Killed)|did not complete within $timeout_s s" <<<"$out" ||
    fail "no message names the lost rank or the stalled collective"$'\n'"$out"
  echo "ok: kill -9 of rank 2: job ended with exit $rc after ${took} ms: $(grep -m1 -E 'rank 2|did not complete' <<<"$out")"
fi

# --- rank 1 stalled (SIGSTOP) inside training: the others time out with our message ---
timeout_s=4
start_long_run stalled --timeout $timeout_s || fail "the run to stall never wrote its first checkpoint"
if stop_rank1 "$job" stalled.log; then
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "with rank 1 stopped the job exited $rc"$'\n'"$out"
  [[ $took -ge $(( timeout_s * 1000 - 500 )) && $took -le $(( (timeout_s + 15) * 1000 )) ]] ||
    fail "the job ended ${took} ms after rank 1 stalled (timeout ${timeout_s} s)"
  n=$(grep -Ec "\[rank [023]/4 .*did not complete within $timeout_s s" <<<"$out")
  [[ $n -ge 1 ]] || fail "no rank reported the stalled collective"$'\n'"$out"
  echo "ok: rank 1 stalled: job ended with exit $rc after ${took} ms; $n rank(s) said: $(grep -m1 'did not complete' <<<"$out" | cut -c1-150)"
fi

# --- the same with --zero 2, buckets of a layer each: the others give up in a reduce-scatter (or
# the all-gather after it) that the stalled rank never joins, after --timeout, naming it ---
timeout_s=4
start_long_run stalled_zero2 --timeout $timeout_s --zero 2 --bucket-mb 0.0001 ||
  fail "the --zero 2 run to stall never wrote its first checkpoint"
if stop_rank1 "$job" stalled_zero2.log; then
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "--zero 2, rank 1 stopped: the job exited $rc"$'\n'"$out"
  [[ $took -le $(( (timeout_s + 15) * 1000 )) ]] ||
    fail "--zero 2: the job ended ${took} ms after rank 1 stalled (timeout ${timeout_s} s)"
  n=$(grep -Ec "\[rank [023]/4 .*did not complete within $timeout_s s" <<<"$out")
  [[ $n -ge 1 ]] || fail "--zero 2: no rank reported the stalled collective"$'\n'"$out"
  echo "ok: --zero 2, rank 1 stalled: exit $rc after ${took} ms; $(grep -m1 'did not complete' <<<"$out" | cut -c1-150)"
fi

# --- a rank stopped while checkpoints are written every step: bounded by the deadlines ---
timeout_s=3
timeout 120 "$mpiexec" -n 2 --oversubscribe "$bin/lockstep-train" --data long.h5 --model mlp:16 \
  --global-batch 32 --steps 100000 --progress none --checkpoint-every 1 --checkpoint-dir stop_ck \
  --timeout $timeout_s --checkpoint-timeout $timeout_s >stop_ck.log 2>&1 &
job=$!
e2e_wait_for_checkpoint stop_ck || fail "the run to stop never wrote its first checkpoint"
if stop_rank1 "$job" stop_ck.log; then
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "rank 1 stopped during checkpointing: the job exited $rc"$'\n'"$out"
  [[ $took -le $(( (timeout_s + 15) * 1000 )) ]] ||
    fail "rank 1 stopped during checkpointing: the job took ${took} ms to end (deadlines ${timeout_s} s)"
  grep -q "did not complete within $timeout_s s" <<<"$out" || fail "no rank named the wait it gave up"$'\n'"$out"
  echo "ok: rank 1 stopped while checkpointing every step: exit $rc after ${took} ms"
fi
# Rank 0 stops itself inside the save of step 5 (test hook): rank 1 waits for the file until
# --checkpoint-timeout (2 s), though --timeout is 60 s.
start=$(date +%s%N)
out=$(LOCKSTEP_TEST_STOP_IN_SAVE=5 timeout 120 "$mpiexec" -n 2 --oversubscribe -x LOCKSTEP_TEST_STOP_IN_SAVE \
      "$bin/lockstep-train" --data long.h5 --model mlp:16 --global-batch 32 --steps 20 --progress none \
      --checkpoint-every 1 --checkpoint-dir hook_ck --timeout 60 --checkpoint-timeout 2 2>&1)
rc=$?
took=$(( ($(date +%s%N) - start) / 1000000 ))
if [[ $rc -eq 0 || $rc -eq 124 || $took -gt 30000 ]]; then
  fail "rank 0 stopped in a save: exit $rc after ${took} ms (expected non-zero within ~2 s of the stop)"$'\n'"$out"
else
  if grep -q "waiting for rank 0 to write hook_ck/ckpt-000000005.h5; the checkpoint deadline is 2 s: --checkpoint-timeout sets it" \
       <<<"$out"; then
    echo "ok: rank 0 stopped in a save: rank 1 gave up after --checkpoint-timeout, exit $rc after ${took} ms"
  else
    fail "rank 1's message names neither the file nor --checkpoint-timeout"$'\n'"$out"
  fi
fi

# --- a save on a full disk: a 256 KiB tmpfs in a private mount namespace ---
mkdir full
out=$(unshare -m bash -c 'mount -t tmpfs -o size=256k lockstep-full full 2>/dev/null || exit 99
  timeout 120 "$1" --data long.h5 --model mlp:32 --global-batch 32 --steps 200 --progress none \
    --checkpoint-every 1 --keep-checkpoints 0 --checkpoint-dir full 2>&1
  echo "rc=$?"
  echo "left: $(ls -A full | tr "\n" " ")"' _ "$bin/lockstep-train" 2>&1)
if [[ $? -eq 99 || $out == *"unshare failed"* ]]; then
  echo "skipped: full disk: cannot mount a tmpfs in a private mount namespace here (needs root)"
else
  rc=$(sed -n 's/^rc=//p' <<<"$out")
  written=$(sed -n 's/^left: //p' <<<"$out" | wc -w)
  newest=$(sed -n 's/^left: //p' <<<"$out" | tr ' ' '\n' | grep '^ckpt-' | sort | tail -1)
  [[ $rc -eq 1 ]] || fail "a save on a full disk: exit $rc, expected 1"$'\n'"$out"
  grep -q "^error: \[rank 0/1 [^]]*\] no space left on device writing full/ckpt-[0-9]*\.h5; newest good checkpoint full/$newest\$" \
    <<<"$out" || fail "a save on a full disk: the message does not say so, naming both files"$'\n'"$out"
  grep -q '\.tmp' <<<"$(sed -n 's/^left: //p' <<<"$out")" && fail "a save on a full disk left its temporary file"$'\n'"$out"
  grep -Eq 'HDF5-DIAG|#[0-9]{3}:' <<<"$out" && fail "a save on a full disk printed HDF5's error stack"$'\n'"$out"
  [[ $failures -eq 0 ]] && echo "ok: full disk after $written checkpoints: $(grep '^error:' <<<"$out" | cut -c1-140)"
fi

# --- the data file cut short while training reads it ---
# 200,000 rows in gzip chunks of 64 rows: the first epoch keeps reading chunks for many seconds
# (--data-in-memory-mb 0: rows from the file at every batch; a split held in memory has been read
# whole before the file is cut).
"$bin/lockstep-data" regression --out cut.h5 --samples 200000 --features 16 --chunk-rows 64 --gzip 1 \
  >/dev/null 2>&1 || fail "lockstep-data regression --gzip 1"
timeout 120 "$mpiexec" -n 2 --oversubscribe "$bin/lockstep-train" --data cut.h5 --model linear \
  --global-batch 64 --steps 100000 --progress none --checkpoint-every 20 --checkpoint-dir cut_ck \
  --data-in-memory-mb 0 \
  >cut.log 2>&1 &
job=$!
if e2e_wait_for_checkpoint cut_ck; then
  start=$(date +%s%N)
  truncate -s $(( $(stat -c %s cut.h5) / 2 )) cut.h5
  wait "$job"
  rc=$?
  took=$(( ($(date +%s%N) - start) / 1000000 ))
  out=$(cat cut.log)
  errors=$(grep -c '^error:' <<<"$out")
  [[ $rc -eq 1 && $took -le 10000 ]] ||
    fail "the data file cut short: exit $rc after ${took} ms, expected 1 within seconds"$'\n'"$out"
  [[ $errors -eq 1 ]] || fail "the data file cut short: $errors error lines, expected 1"$'\n'"$out"
  grep -Eq "^error: \[rank [01]/2 [^]]*\] cut\.h5: train/[xy]: rows [0-9]+ to [0-9]+ cannot be read \(.*\): the file was cut short or changed while training read it" \
    <<<"$out" || fail "the data file cut short: the message names no file, dataset or rows"$'\n'"$out"
  [[ $failures -eq 0 ]] && echo "ok: data file cut short: exit $rc after ${took} ms: $(grep '^error:' <<<"$out" | cut -c1-150)"
else
  fail "the run on cut.h5 never wrote its first checkpoint"$'\n'"$(cat cut.log)"
  kill "$job" 2>/dev/null
fi

# --- the loss overflows: stop naming the step; no checkpoint with NaN or Inf ---
"$bin/lockstep-data" regression --out reg.h5 --samples 256 --features 6 >/dev/null 2>&1
train 2 --data reg.h5 --model mlp:16 --global-batch 32 --epochs 3 --optimizer sgd --lr 1e30 \
  --progress none --checkpoint-dir nan_ck --checkpoint-every 1
step=$(sed -n 's/.*is not finite (NaN or Inf) at step \([0-9]*\) (epoch 1).*/\1/p' <<<"$out" | head -1)
if [[ $rc -ne 2 || -z $step ]]; then
  fail "--lr 1e30: expected exit 2 naming the step, got $rc"$'\n'"$out"
else
  last=$(printf 'nan_ck/ckpt-%09d.h5' $((step - 1)))
  grep -q "the last good checkpoint is $last" <<<"$out" || fail "the message does not name $last"$'\n'"$out"
  [[ -f $last ]] || fail "$last is missing"
  for f in nan_ck/ckpt-*.h5; do
    [[ $f -nt $last ]] && fail "$f was written after the last good checkpoint"
    non_finite "$f" && fail "$f holds a NaN or Inf parameter"
  done
  echo "ok: --lr 1e30 stopped: $(grep -m1 '^error:' <<<"$out" | cut -c1-160)"
fi

# --- --on-nan skip when the update itself overflows: the parameters are NaN, every later step
# would be skipped; the 20th skipped step in a row stops the run, exit 2 (before: every remaining
# step skipped, exit 0, test_mse=nan) ---
train 2 --data reg.h5 --model linear --global-batch 32 --steps 60 --optimizer sgd --lr 1e36 \
  --on-nan skip --progress none
if [[ $rc -eq 2 ]] && grep -q "the 20th step in a row skipped (--on-nan skip): the parameters are likely no longer finite" <<<"$out" &&
   ! grep -q '^test_' <<<"$out"; then
  echo "ok: --on-nan skip stops after 20 skipped steps in a row: $(grep -m1 '^error:' <<<"$out" | cut -c1-120)"
else
  fail "--on-nan skip with parameters overflowed: exit $rc, expected 2 after 20 skipped steps"$'\n'"$out"
fi

# --- one NaN in the inputs: skip exactly the steps that hold it, or stop there ---
# 64 training rows of 4 features, row 9's first feature NaN; 16 test rows.
awk 'BEGIN { srand(5); for (i = 0; i < 64; i++) { for (j = 0; j < 4; j++)
       printf "%s%s", (i == 9 && j == 0) ? "nan" : sprintf("%.6f", rand() * 2 - 1), j < 3 ? " " : "\n" } }' >tx.txt
awk '{ print $2 + 0.5 * $3 }' tx.txt >ty.txt
awk 'BEGIN { srand(6); for (i = 0; i < 16; i++) printf "%.6f %.6f %.6f %.6f\n", rand(), rand(), rand(), rand() }' >vx.txt
awk '{ print $2 + 0.5 * $3 }' vx.txt >vy.txt
cfg() {  # cfg path rows [cols]
  printf 'PATH %s\nINPUT-CLASS TEXTFP\nRANK %s\nDIMENSION-SIZES %s\nOUTPUT-CLASS FP\nOUTPUT-SIZE 32\nOUTPUT-ARCHITECTURE IEEE\nOUTPUT-BYTE-ORDER LE\n' \
    "$1" "$([[ -n ${3:-} ]] && echo 2 || echo 1)" "$2${3:+ $3}"
}
cfg train/x 64 4 >tx.cfg
cfg train/y 64 >ty.cfg
cfg test/x 16 4 >vx.cfg
cfg test/y 16 >vy.cfg
h5import tx.txt -c tx.cfg ty.txt -c ty.cfg vx.txt -c vx.cfg vy.txt -c vy.cfg -o poison.h5 >/dev/null ||
  fail "h5import could not write poison.h5"
poison=(--data poison.h5 --model mlp:8 --global-batch 16 --epochs 3 --optimizer momentum --lr 0.05
        --progress none)
train 2 "${poison[@]}" --on-nan skip --checkpoint-dir skip_ck
skipped=$(grep -c 'step skipped (--on-nan skip)' <<<"$out")
if [[ $rc -ne 0 || $skipped -ne 3 ]]; then
  fail "--on-nan skip: expected exit 0 and 3 skipped steps (one per epoch), got exit $rc, $skipped"$'\n'"$out"
else
  grep -q '3 of 12 steps were skipped' <<<"$out" || fail "no summary of the skipped steps"$'\n'"$out"
  loss=$(sed -n 's/^test_loss=//p' <<<"$out")
  [[ $loss =~ ^[0-9.e+-]+$ ]] || fail "the final test loss is not a finite number: '$loss'"
  non_finite skip_ck/ckpt-000000012.h5 && fail "the final checkpoint holds a NaN or Inf"
  echo "ok: --on-nan skip: 3 of 12 steps skipped, test_loss=$loss"
fi
# Under --on-nan stop (the default) the row is refused as it is read, naming it (before: the step's
# loss was found not finite, and the data named only as a possible cause).
train 2 "${poison[@]}"
grep -q "error: .*poison.h5: train/x: row 9, value 0 is nan as a float32" <<<"$out" &&
  [[ $rc -eq 2 ]] || fail "--on-nan stop did not refuse row 9 with exit 2 (exit $rc)"$'\n'"$out"

# --- a rank late to its first batch: the start-up deadline, not --timeout, bounds the wait ---
# Rank 1 waits 3 s before its first batch (test hook), as a rank reading a large split from a slow
# shared file system would; --timeout 1 alone would fail rank 0 in the first step's all-reduce.
late=(--data long.h5 --model mlp:16 --global-batch 32 --steps 6 --progress none --timeout 1)
out=$(LOCKSTEP_TEST_DELAY_FIRST_BATCH=1:3000 timeout 120 "$mpiexec" -n 2 --oversubscribe \
      -x LOCKSTEP_TEST_DELAY_FIRST_BATCH "$bin/lockstep-train" "${late[@]}" --startup-timeout 30 2>&1)
rc=$?
[[ $rc -eq 0 ]] || fail "rank 1 late by 3 s with --startup-timeout 30: exit $rc"$'\n'"$out"
out=$(LOCKSTEP_TEST_DELAY_FIRST_BATCH=1:3000 timeout 120 "$mpiexec" -n 2 --oversubscribe \
      -x LOCKSTEP_TEST_DELAY_FIRST_BATCH "$bin/lockstep-train" "${late[@]}" --startup-timeout 1 2>&1)
rc2=$?
[[ $rc2 -ne 0 && $rc2 -ne 124 ]] && grep -q "did not complete within 1 s" <<<"$out" ||
  fail "rank 1 late by 3 s with --startup-timeout 1: exit $rc2, expected a timeout"$'\n'"$out"
[[ $rc -eq 0 && $rc2 -ne 0 ]] &&
  echo "ok: a rank 3 s late to its first batch: done under --startup-timeout 30 (--timeout 1), a timeout under --startup-timeout 1"

if [[ $failures -gt 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all fault checks passed"
