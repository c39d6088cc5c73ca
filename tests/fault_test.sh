#!/usr/bin/env bash
# Faults, end to end with lockstep-train:
#  - a rank killed with kill -9 mid-training: the job ends non-zero within the bound (--timeout plus
#    slack), and the output names the lost rank (mpiexec's notice or our own message);
#  - a rank stalled inside a collective (SIGSTOP, which mpiexec does not notice): every other rank
#    exits non-zero after --timeout with a message naming the collective it waited in;
#  - a loss that overflows (--lr 1e30): exit 2 with a message naming the step and the last good
#    checkpoint, and no checkpoint holds a NaN or Inf;
#  - a NaN in one training row: --on-nan skip skips exactly the step that holds it in each epoch
#    and finishes with a finite model; --on-nan stop names that step.
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
# The rank processes of a job started in the background as `timeout ... mpiexec ...` (pid $1)
# whose MPI rank is $2.
rank_pid() {
  local p q
  for p in $(pgrep -P "$1"); do
    for q in $(pgrep -P "$p"); do
      grep -qz "^OMPI_COMM_WORLD_RANK=$2\$" "/proc/$q/environ" 2>/dev/null && echo "$q"
    done
  done
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
victim=$(rank_pid "$job" 2)
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
victim=$(rank_pid "$job" 1)
if [[ -z $victim ]]; then
  fail "could not find rank 1"
else
  start=$(date +%s%N)
  kill -STOP "$victim"
  wait "$job"
  rc=$?
  took=$(( ($(date +%s%N) - start) / 1000000 ))
  kill -KILL "$victim" 2>/dev/null
  out=$(cat stalled.log)
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "with rank 1 stopped the job exited $rc"$'\n'"$out"
  [[ $took -ge $(( timeout_s * 1000 - 500 )) && $took -le $(( (timeout_s + 15) * 1000 )) ]] ||
    fail "the job ended ${took} ms after rank 1 stalled (timeout ${timeout_s} s)"
  n=$(grep -Ec "\[rank [023]/4 .*did not complete within $timeout_s s" <<<"$out")
  [[ $n -ge 1 ]] || fail "no rank reported the stalled collective"$'\n'"$out"
  echo "ok: rank 1 stalled: job ended with exit $rc after ${took} ms; $n rank(s) said: $(grep -m1 'did not complete' <<<"$out" | cut -c1-150)"
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
first=$(sed -n 's/.*at step \([0-9]*\) (epoch 1): step skipped.*/\1/p' <<<"$out")
train 2 "${poison[@]}"
grep -q "error: the loss is not finite (NaN or Inf) at step $first (epoch 1): training stopped" <<<"$out" &&
  [[ $rc -eq 2 ]] || fail "--on-nan stop did not stop at step $first with exit 2 (exit $rc)"$'\n'"$out"

if [[ $failures -gt 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all fault checks passed"
