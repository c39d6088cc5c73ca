#!/usr/bin/env bash
# Checkpoints and resume, end to end with lockstep-train on a tiny regression set:
#  - a run whose rank 0 dies while saving (test hook: killed after writing the temporary file, before
#    the rename) leaves the previous checkpoint intact; resuming from it at the same world size ends
#    with parameters and optimizer state bitwise identical to an uninterrupted run;
#    and so it does given only --data and --resume: the options not given are the checkpoint's
#    run's (model, optimizer, schedule, batch, length);
#  - resumed at another world size (4 -> 2, 2 -> 4) it matches within float tolerance;
#  - --eval-only evaluates a checkpoint at 1, 2 and 3 ranks with the figures its run printed, also
#    from a file holding the test split alone, and cuts its batch to a smaller test split;
#  - --zero 1 and 2 (sharded optimizer state, and gradients) write the same files: saved sharded at
#    4 ranks they resume at 1-4 ranks at any stage, and unsharded checkpoints resume sharded;
#  - SIGTERM to one rank: every rank stops after the same step, a checkpoint is written, exit 75
#    (stopped early, resumable; a completed run exits 0); --resume continues to the same bits as an
#    uninterrupted run; SIGUSR1 to mpiexec (which forwards it) does the same; a world of one
#    stopped by SIGINT exits 75 as well;
#  - refusals through the CLI, once, exit 2: another model, another shape, another optimizer, a
#    changed global batch or seed, truncated / corrupt / garbage / non-checkpoint files, an empty
#    folder, a missing path;
#  - a fresh run pointed at a --checkpoint-dir holding another run's checkpoints is refused, naming
#    them, and leaves them as they were, and so is a run resumed from a third run's checkpoint
#    (--resume elsewhere); --overwrite-checkpoints deletes them and starts afresh; a --resume whose
#    checkpoint is at or past the run's --steps is refused (nothing left to train).
# ctest sets LOCKSTEP_BIN (the apps build folder) and MPIEXEC. Needs h5dump (hdf5-tools).
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-train lockstep-data
e2e_require_commands h5dump od

e2e_workdir resume
cd "$work" || exit 1

# run P [args...]: lockstep-train at P ranks, bounded; output in $out, exit status in $rc.
run() {
  local np=$1
  shift
  out=$(timeout 120 "$mpiexec" -n "$np" --oversubscribe "$@" 2>&1)
  rc=$?
}
train() {
  local np=$1
  shift
  if [[ $np -eq 1 ]]; then  # a world of one needs no mpiexec (and starts 4x faster)
    out=$(timeout 120 "$bin/lockstep-train" "$@" 2>&1)
    rc=$?
  elif [[ -n ${LOCKSTEP_TEST_CRASH_IN_SAVE:-} ]]; then
    run "$np" -x LOCKSTEP_TEST_CRASH_IN_SAVE "$bin/lockstep-train" "$@"
  else
    run "$np" "$bin/lockstep-train" "$@"
  fi
}
# The ranks of a job started in the background as `timeout ... mpiexec ...` (pid $1).
ranks_of() {
  local p
  for p in $(pgrep -P "$1"); do pgrep -P "$p"; done
}
# Parameters and optimizer state of a checkpoint, as raw little-endian bytes.
state_bytes() {
  h5dump -b LE -o "$2.params" -g /params "$1" >/dev/null &&
    h5dump -b LE -o "$2.optimizer" -g /optimizer "$1" >/dev/null &&
    cat "$2.params" "$2.optimizer" >"$2"
}
same_bits() {
  state_bytes "$1" a.bin && state_bytes "$2" b.bin && cmp -s a.bin b.bin
}
# Largest absolute difference of any parameter or optimizer value is at most 1e-5 (the values are
# of order 1; a resume that lost its place is off by far more).
within_tolerance() {
  state_bytes "$1" a.bin && state_bytes "$2" b.bin || return 1
  paste <(od -An -v -f -w4 a.bin) <(od -An -v -f -w4 b.bin) |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
         END { printf "max difference %g over %d values\n", m, NR; exit !(NR > 0 && m <= 1e-5) }'
}

"$bin/lockstep-data" regression --out reg.h5 --samples 460 --features 6 --seed 3 >/dev/null 2>&1 ||
  { echo "FAIL: lockstep-data regression"; exit 1; }
"$bin/lockstep-data" regression --out reg4.h5 --samples 460 --features 4 --seed 3 >/dev/null 2>&1

# 460 rows / 32 = 15 steps per epoch, the last one masked; 3 epochs = 45 steps. Momentum has
# optimizer state; cosine with warm-up makes the learning rate depend on the step.
args=(--data reg.h5 --model mlp:16 --global-batch 32 --epochs 3 --optimizer momentum --lr 0.05
      --lr-schedule cosine --warmup-steps 5 --progress none --checkpoint-every 10)
final=ckpt-000000045.h5

# --- the uninterrupted runs ---
unset LOCKSTEP_TEST_CRASH_IN_SAVE
train 2 "${args[@]}" --checkpoint-dir full2
[[ $rc -eq 0 && -f full2/$final ]] || fail "uninterrupted run at 2 ranks: exit $rc"$'\n'"$out"
train 4 "${args[@]}" --checkpoint-dir full4
[[ $rc -eq 0 && -f full4/$final ]] || fail "uninterrupted run at 4 ranks: exit $rc"$'\n'"$out"
ls full2 | grep -q ckpt-000000010.h5 && fail "--keep-checkpoints 3 kept ckpt-10 of 10,20,30,40,45"
[[ $(ls full2 | wc -l) -eq 3 ]] || fail "expected the 3 newest checkpoints, found: $(ls full2)"

# --- rank 0 dies while saving step 30: ckpt-20 survives and resumes bitwise at the same P ---
export LOCKSTEP_TEST_CRASH_IN_SAVE=30
train 2 "${args[@]}" --checkpoint-dir crash2
[[ $rc -ne 0 ]] || fail "the run with the crash hook exited 0"
[[ -f crash2/ckpt-000000020.h5 && ! -f crash2/ckpt-000000030.h5 ]] ||
  fail "after a crash in the save of step 30, expected ckpt-20 and no ckpt-30: $(ls -a crash2)"
[[ -f crash2/.ckpt-000000030.h5.tmp ]] || fail "the hook did not fire after the temporary file"
cp -r crash2 crash2b
cp -r crash2 crash2c
unset LOCKSTEP_TEST_CRASH_IN_SAVE
train 2 "${args[@]}" --checkpoint-dir crash2 --resume crash2
[[ $rc -eq 0 ]] || fail "resume at 2 ranks exited $rc"$'\n'"$out"
grep -q "resuming from crash2/ckpt-000000020.h5: step 20" <<<"$out" ||
  fail "resume did not say it continues from step 20"$'\n'"$out"
[[ ! -e crash2/.ckpt-000000030.h5.tmp ]] || fail "the orphaned temporary file was not cleaned up"
if same_bits full2/$final crash2/$final; then
  echo "ok: resumed at the same world size: bitwise identical to the uninterrupted run"
else
  fail "resumed run at 2 ranks differs from the uninterrupted run"
fi

# Given only --data and --resume (and where to save), the run continues with the checkpoint's
# model, optimizer, schedule, batch and length: the same bits again.
train 2 --data reg.h5 --progress none --checkpoint-every 10 --checkpoint-dir crash2c --resume crash2c
[[ $rc -eq 0 ]] || fail "resume with only --data and --resume exited $rc"$'\n'"$out"
grep -q -- "as the checkpoint's run had them, .*--model mlp:16, .*--optimizer momentum, --lr 0.05" <<<"$out" ||
  fail "the resume did not say which options it took from the checkpoint"$'\n'"$out"
if same_bits full2/$final crash2c/$final; then
  echo "ok: resumed with only --data and --resume: bitwise identical to the uninterrupted run"
else
  fail "resumed with the checkpoint's options, the run differs from the uninterrupted run"
fi

# --- another world size: 2 -> 4 and 4 -> 2 ---
train 4 "${args[@]}" --checkpoint-dir crash2b --resume crash2b/ckpt-000000020.h5
[[ $rc -eq 0 ]] || fail "resume 2 -> 4 exited $rc"$'\n'"$out"
grep -q "written at 2 rank(s)" <<<"$out" || fail "resume 2 -> 4 did not name the saved world size"
before=$failures
within_tolerance full4/$final crash2b/$final || fail "resume 2 -> 4 is not within 1e-5 of the run at 4"
within_tolerance full2/$final crash2b/$final || fail "resume 2 -> 4 is not within 1e-5 of the run at 2"

export LOCKSTEP_TEST_CRASH_IN_SAVE=30
train 4 "${args[@]}" --checkpoint-dir crash4
unset LOCKSTEP_TEST_CRASH_IN_SAVE
[[ -f crash4/ckpt-000000020.h5 && ! -f crash4/ckpt-000000030.h5 ]] || fail "crash at 4 ranks: $(ls crash4)"
train 2 "${args[@]}" --checkpoint-dir crash4 --resume crash4
[[ $rc -eq 0 ]] || fail "resume 4 -> 2 exited $rc"$'\n'"$out"
within_tolerance full2/$final crash4/$final || fail "resume 4 -> 2 is not within 1e-5 of the run at 2"
within_tolerance full4/$final crash4/$final || fail "resume 4 -> 2 is not within 1e-5 of the run at 4"
[[ $failures -eq $before ]] && echo "ok: resumed at another world size (2 -> 4, 4 -> 2): within 1e-5"

# --- ZeRO (--zero 1, 2): the same checkpoint files; across stages and world sizes ---
# A global batch of 48 (1-4 ranks divide it): 10 steps an epoch, 30 in all. Saved at step 10 by a
# 4-rank --zero 1 run, resumed at 1, 2, 3 and 4 ranks with and without --zero, and the reverse
# (saved unsharded at 2 ranks, resumed sharded at 3 and 4): each within 1e-5 of the uninterrupted
# runs; at the same world size and stage, bit for bit.
before=$failures
zargs=("${args[@]/32/48}")  # the same run at --global-batch 48
zfinal=ckpt-000000030.h5
train 4 "${zargs[@]}" --zero 1 --checkpoint-dir zfull4
[[ $rc -eq 0 && -f zfull4/$zfinal ]] || fail "uninterrupted --zero 1 run at 4 ranks: exit $rc"$'\n'"$out"
train 2 "${zargs[@]}" --checkpoint-dir zfull2
[[ $rc -eq 0 && -f zfull2/$zfinal ]] || fail "uninterrupted run at 2 ranks: exit $rc"$'\n'"$out"
trained_figures=$(grep -E '^test_(mse|loss)=' <<<"$out")
export LOCKSTEP_TEST_CRASH_IN_SAVE=20
train 4 "${zargs[@]}" --zero 1 --checkpoint-dir zsave4
train 2 "${zargs[@]}" --checkpoint-dir zsave2
train 4 "${zargs[@]}" --zero 2 --checkpoint-dir zsave4g
unset LOCKSTEP_TEST_CRASH_IN_SAVE
[[ -f zsave4/ckpt-000000010.h5 && -f zsave2/ckpt-000000010.h5 && -f zsave4g/ckpt-000000010.h5 ]] ||
  fail "no ckpt-10 saved: $(ls zsave4 zsave2 zsave4g)"
for np in 1 2 3 4; do
  for zero in 0 1 2; do
    rm -rf "z_${np}_$zero" && mkdir "z_${np}_$zero" && cp zsave4/ckpt-000000010.h5 "z_${np}_$zero/"
    train "$np" "${zargs[@]}" --zero "$zero" --checkpoint-dir "z_${np}_$zero" --resume "z_${np}_$zero"
    [[ $rc -eq 0 ]] || { fail "--zero 1 at 4 -> --zero $zero at $np: exit $rc"$'\n'"$out"; continue; }
    within_tolerance zfull4/$zfinal "z_${np}_$zero/$zfinal" >/dev/null ||
      fail "--zero 1 at 4 -> --zero $zero at $np is not within 1e-5 of the run at 4"
  done
done
same_bits zfull4/$zfinal z_4_1/$zfinal || fail "--zero 1 resumed at 4 ranks differs from its uninterrupted run"
# Stage 2 reduces as stage 1 does (one reduce-scatter per bucket, the same norm): the same bits.
same_bits zfull4/$zfinal z_4_2/$zfinal || fail "--zero 1 at 4 -> --zero 2 at 4 differs from the --zero 1 run"
# Saved by a --zero 2 run, resumed unsharded at 3 ranks.
rm -rf zg_3 && mkdir zg_3 && cp zsave4g/ckpt-000000010.h5 zg_3/
train 3 "${zargs[@]}" --checkpoint-dir zg_3 --resume zg_3
[[ $rc -eq 0 ]] || fail "--zero 2 at 4 -> --zero 0 at 3: exit $rc"$'\n'"$out"
within_tolerance zfull4/$zfinal zg_3/$zfinal >/dev/null ||
  fail "--zero 2 at 4 -> --zero 0 at 3 is not within 1e-5 of the run at 4"
for np in 3 4; do
  rm -rf "zr_$np" && mkdir "zr_$np" && cp zsave2/ckpt-000000010.h5 "zr_$np/"
  train "$np" "${zargs[@]}" --zero 1 --checkpoint-dir "zr_$np" --resume "zr_$np"
  [[ $rc -eq 0 ]] || { fail "--zero 0 at 2 -> --zero 1 at $np: exit $rc"$'\n'"$out"; continue; }
  within_tolerance zfull2/$zfinal "zr_$np/$zfinal" >/dev/null ||
    fail "--zero 0 at 2 -> --zero 1 at $np is not within 1e-5 of the run at 2"
done
[[ $failures -eq $before ]] &&
  echo "ok: --zero 1 and 2 checkpoints resume at 1-4 ranks at any stage (and back), within 1e-5; bitwise at the same size"

# --- --gather-dtype bf16: the checkpoints hold the fp32 masters; a resume rounds them again ---
# Saved at step 10 by a 2-rank run, resumed at 2 ranks: the bits of the uninterrupted run (the
# masters, the state, and so the parameters computed with). Resumed at 3 ranks with --zero 2, and
# unsharded at 1 rank: they train on from it.
before=$failures
train 2 "${zargs[@]}" --zero 1 --gather-dtype bf16 --checkpoint-dir zbfull
[[ $rc -eq 0 && -f zbfull/$zfinal ]] || fail "uninterrupted --gather-dtype bf16 run: exit $rc"$'\n'"$out"
export LOCKSTEP_TEST_CRASH_IN_SAVE=20
train 2 "${zargs[@]}" --zero 1 --gather-dtype bf16 --checkpoint-dir zbsave
unset LOCKSTEP_TEST_CRASH_IN_SAVE
[[ -f zbsave/ckpt-000000010.h5 ]] || fail "no ckpt-10 saved by the bf16-gather run: $(ls zbsave)"
for run in "2 1" "3 2" "1 0"; do
  read -r np zero <<<"$run"
  dir="zb_${np}_$zero" && rm -rf "$dir" && mkdir "$dir" && cp zbsave/ckpt-000000010.h5 "$dir/"
  gather=(--gather-dtype bf16)
  [[ $zero == 0 ]] && gather=()
  train "$np" "${zargs[@]}" --zero "$zero" "${gather[@]}" --checkpoint-dir "$dir" --resume "$dir"
  [[ $rc -eq 0 && -f $dir/$zfinal ]] || fail "bf16 gather at 2 -> --zero $zero at $np: exit $rc"$'\n'"$out"
done
same_bits zbfull/$zfinal zb_2_1/$zfinal || fail "--gather-dtype bf16 resumed at 2 ranks differs from its uninterrupted run"
[[ $failures -eq $before ]] && echo "ok: --gather-dtype bf16 resumes bit for bit at its size, and at others"

# --- --eval-only: the figures the run printed at its end, from its last checkpoint, at any P ---
before=$failures
for np in 1 2 3; do
  train "$np" "${zargs[@]}" --resume zfull2/$zfinal --eval-only
  got=$(grep -E '^test_(mse|loss)=' <<<"$out")
  [[ $rc -eq 0 && -n $got && $got == "$trained_figures" ]] ||
    fail "--eval-only at $np rank(s): exit $rc, '$got' against the run's '$trained_figures'"$'\n'"$out"
done
# It reads the test split alone: a file holding nothing else gives the same figures (before: "no
# group 'train'"). A test split smaller than the run's batch of 48 is evaluated in batches cut to
# its 30 rows, as an explicit --global-batch 30 evaluates it (before: refused, "--global-batch 48 is
# larger than the 30 training samples").
if command -v h5copy >/dev/null; then
  h5copy -i reg.h5 -o test_only.h5 -s /test -d /test || fail "h5copy of reg.h5's test split"
  train 2 "${zargs[@]/reg.h5/test_only.h5}" --resume zfull2/$zfinal --eval-only
  got=$(grep -E '^test_(mse|loss)=' <<<"$out")
  [[ $rc -eq 0 && $got == "$trained_figures" ]] ||
    fail "--eval-only on a file of the test split alone: exit $rc, '$got'"$'
'"$out"
  "$bin/lockstep-data" regression --out small_test.h5 --samples 460 --test-samples 30 --features 6 \
    --seed 3 >/dev/null 2>&1 && h5copy -i small_test.h5 -o small_only.h5 -s /test -d /test ||
    fail "writing small_only.h5"
  train 2 --data small_only.h5 --resume zfull2/$zfinal --eval-only
  got=$(grep -E '^test_(mse|loss)=' <<<"$out")
  train 2 --data small_only.h5 --resume zfull2/$zfinal --eval-only --global-batch 30
  want=$(grep -E '^test_(mse|loss)=' <<<"$out")
  [[ -n $got && $got == "$want" ]] ||
    fail "--eval-only on 30 test rows: '$got', with --global-batch 30: '$want'"$'\n'"$out"
else
  echo "skipped --eval-only on a file of the test split alone: no h5copy (Debian's hdf5-tools)"
fi
train 1 "${zargs[@]}" --eval-only
[[ $rc -eq 2 ]] && grep -q -- "--eval-only needs --resume" <<<"$out" ||
  fail "--eval-only without --resume: exit $rc"$'\n'"$out"
[[ $failures -eq $before ]] &&
  echo "ok: --eval-only at 1, 2 and 3 ranks prints the run's own end figures: $(tr '\n' ' ' <<<"$trained_figures")"

# --- SIGTERM to one rank (as a scheduler delivers it): all stop at one step, save, exit 75 ---
"$bin/lockstep-data" regression --out long.h5 --samples 2000 --features 6 --seed 4 >/dev/null 2>&1
long=(--data long.h5 --model mlp:16 --global-batch 32 --steps 4000 --optimizer momentum --lr 0.02
      --progress none --checkpoint-every 100)
train 2 "${long[@]}" --checkpoint-dir long_full
[[ $rc -eq 0 && -f long_full/ckpt-000004000.h5 ]] || fail "long uninterrupted run: exit $rc"$'\n'"$out"

timeout 120 "$mpiexec" -n 2 --oversubscribe "$bin/lockstep-train" "${long[@]}" \
  --checkpoint-dir long_term >term.log 2>&1 &
job=$!
e2e_wait_for_checkpoint long_term
victim=""
for p in $(ranks_of "$job"); do
  grep -qz '^OMPI_COMM_WORLD_RANK=1$' "/proc/$p/environ" 2>/dev/null && victim=$p
done
if [[ -z $victim ]]; then
  fail "could not find rank 1 of the SIGTERM run"
  kill "$job" 2>/dev/null
fi
kill -TERM "$victim" 2>/dev/null
wait "$job"
rc=$?
out=$(cat term.log)
step=$(sed -n 's/.*stopped by SIGTERM after step \([0-9]*\).*/\1/p' <<<"$out")
if [[ $rc -ne 75 || -z $step ]]; then
  fail "SIGTERM to rank 1: exit $rc (expected 75), no 'stopped by SIGTERM after step N'"$'\n'"$out"
else
  ckpt=$(printf 'long_term/ckpt-%09d.h5' "$step")
  [[ -f $ckpt ]] || fail "stopped after step $step but $ckpt is missing: $(ls long_term)"
  [[ $step -lt 4000 ]] || fail "SIGTERM arrived too late to test anything (step $step)"
  grep -q 'test_loss=' <<<"$out" && fail "a stopped run still printed a final report"
  train 2 "${long[@]}" --checkpoint-dir long_term --resume long_term
  [[ $rc -eq 0 ]] || fail "resume after SIGTERM exited $rc"$'\n'"$out"
  grep -q "resuming from $ckpt: step $step" <<<"$out" || fail "resume did not start at $step"$'\n'"$out"
  same_bits long_full/ckpt-000004000.h5 long_term/ckpt-000004000.h5 ||
    fail "the run stopped by SIGTERM at step $step and resumed differs from the uninterrupted one"
  echo "ok: SIGTERM to rank 1 stopped both ranks after step $step; resumed run bitwise identical"
fi

# SIGUSR1 to mpiexec, which forwards it to every rank (it turns its own SIGTERM into a kill).
timeout 120 "$mpiexec" -n 2 --oversubscribe "$bin/lockstep-train" "${long[@]}" \
  --checkpoint-dir long_usr1 >usr1.log 2>&1 &
job=$!
e2e_wait_for_checkpoint long_usr1
kill -USR1 "$(pgrep -P "$job")"
wait "$job"
rc=$?
step=$(sed -n 's/.*stopped by SIGUSR1 after step \([0-9]*\).*/\1/p' usr1.log)
[[ $rc -eq 75 && -n $step && -f $(printf 'long_usr1/ckpt-%09d.h5' "${step:-0}") ]] ||
  fail "SIGUSR1 to mpiexec: exit $rc (expected 75), step '$step'"$'\n'"$(cat usr1.log)"

# A world of one (no mpiexec in between): Ctrl-C's SIGINT, exit 75 straight from the process.
timeout 120 "$bin/lockstep-train" "${long[@]/#4000/400000}" --checkpoint-dir long_int >int.log 2>&1 &
job=$!
e2e_wait_for_checkpoint long_int
kill -INT "$(pgrep -P "$job")"
wait "$job"
rc=$?
step=$(sed -n 's/.*stopped by SIGINT after step \([0-9]*\).*/\1/p' int.log)
if [[ $rc -eq 75 && -n $step && -f $(printf 'long_int/ckpt-%09d.h5' "${step:-0}") ]]; then
  echo "ok: SIGINT to a world of one: stopped after step $step with its checkpoint, exit 75"
else
  fail "SIGINT to a world of one: exit $rc (expected 75), step '$step'"$'\n'"$(cat int.log)"
fi

# --- refusals: exit 2, one message naming the file and the problem ---
good=full2/$final
# refused "what" "expected words" [--option value]...: the run of ${args[@]} (all option and
# value pairs) at $np ranks with these options replaced or added must exit 2 with one message.
np=2
refused() {
  local what=$1 words=$2
  shift 2
  local -A over=()
  while (($#)); do
    over[$1]=$2
    shift 2
  done
  local a=() i k v
  for ((i = 0; i < ${#args[@]}; i += 2)); do
    k=${args[i]} v=${args[i + 1]}
    if [[ -n ${over[$k]+set} ]]; then
      v=${over[$k]}
      unset "over[$k]"
    fi
    a+=("$k" "$v")
  done
  [[ -n ${over[--checkpoint-dir]+set} ]] || a+=(--checkpoint-dir refusals)
  for k in "${!over[@]}"; do a+=("$k" "${over[$k]}"); done
  train $np "${a[@]}"
  local errors
  errors=$(grep -c '^error:' <<<"$out")
  if [[ $rc -ne 2 || $errors -ne 1 ]] || ! grep -q -- "$words" <<<"$out"; then
    fail "$what: expected exit 2 and one error with '$words', got exit $rc"$'\n'"$out"
  else
    echo "ok: refused $what: $(grep '^error:' <<<"$out")"
  fi
}
refused "another model" "was written for model 'dense:16,relu,dense', this run's model is" \
  --resume "$good" --model mlp:8
refused "another input shape" "dense0.weight has shape (6, 16) in the checkpoint, the model needs (4, 16)" \
  --resume "$good" --data reg4.h5
np=1  # the rest in a world of one: the same code, faster
refused "another optimizer" "optimizer buffer adam_m/dense0.weight is missing from the checkpoint" \
  --resume "$good" --optimizer adam
refused "another global batch" "written with --global-batch 32, this run has 64" \
  --resume "$good" --global-batch 64
refused "another seed" "written with --seed 0, this run has --seed 7" --resume "$good" --seed 7
head -c 3000 "$good" >truncated.h5
refused "a truncated file" "checkpoint truncated.h5 cannot be used" --resume truncated.h5
cp "$good" corrupt.h5
offset=$(h5dump -p -H -d /params/dense0.weight corrupt.h5 | sed -n 's/ *OFFSET \([0-9]*\).*/\1/p')
printf '\x7f\x7f\x7f\x7f' | dd of=corrupt.h5 bs=1 seek=$((offset + 40)) conv=notrunc status=none
refused "a corrupt file" "dense0.weight is corrupt" --resume corrupt.h5
head -c 4096 /dev/urandom >garbage.h5
refused "a garbage file" "not an HDF5 file" --resume garbage.h5
refused "a dataset file" "not a Lockstep checkpoint" --resume reg.h5
mkdir empty
refused "an empty folder" "no checkpoint in folder empty" --resume empty
refused "a missing path" "checkpoint nowhere/ckpt.h5 does not exist" --resume nowhere/ckpt.h5
refused "a bad --on-nan" "--on-nan must be stop or skip" --on-nan maybe
touch plain_file
refused "an unusable --checkpoint-dir" "--checkpoint-dir plain_file/ck cannot be created" \
  --checkpoint-dir plain_file/ck
train 2 --data reg.h5 --checkpoint-every 10
grep -q -- "--checkpoint-every needs --checkpoint-dir" <<<"$out" && [[ $rc -eq 2 ]] ||
  fail "--checkpoint-every without --checkpoint-dir: exit $rc"$'\n'"$out"

# --- a fresh run into a folder holding another run's checkpoints ---
other=(--data reg.h5 --model mlp:16 --global-batch 32 --progress none --checkpoint-every 2)
train 1 "${other[@]}" --steps 4 --seed 5 --checkpoint-dir other
before=$(cksum other/*.h5)
train 2 "${other[@]}" --steps 3 --checkpoint-dir other
errors=$(grep -c '^error:' <<<"$out")
if [[ $rc -ne 2 || $errors -ne 1 ]] ||
   ! grep -q -- "--checkpoint-dir other already holds 2 checkpoint(s) of an earlier run (ckpt-000000002.h5, ckpt-000000004.h5): continue that run with --resume other, pass --overwrite-checkpoints" <<<"$out"; then
  fail "a fresh run into another run's checkpoints: exit $rc, expected 2 naming them"$'\n'"$out"
fi
[[ $(cksum other/*.h5) == "$before" ]] || fail "the refused run changed the other run's checkpoints"
# A run resumed from a third run's checkpoint is not that run either: the same refusal.
train 1 "${other[@]}" --steps 2 --seed 5 --checkpoint-dir third
train 1 "${other[@]}" --steps 6 --seed 5 --checkpoint-dir other --resume third
[[ $rc -eq 2 ]] && grep -q -- "--checkpoint-dir other already holds 2 checkpoint(s)" <<<"$out" ||
  fail "resumed from third into other's checkpoints: exit $rc, expected 2 naming them"$'\n'"$out"
[[ $(cksum other/*.h5) == "$before" ]] || fail "the run resumed from third changed other's checkpoints"
# --steps counts from the run's start: a checkpoint at step 4 with --steps 4 has nothing to train.
train 1 "${other[@]}" --steps 4 --seed 5 --checkpoint-dir other --resume other
[[ $rc -eq 2 ]] && grep -q "is at step 4, and this run ends at step 4 (--steps 4): nothing is left to train" <<<"$out" ||
  fail "--resume at step 4 with --steps 4: exit $rc, expected 2 saying nothing is left"$'\n'"$out"
train 1 "${other[@]}" --steps 3 --checkpoint-dir other --overwrite-checkpoints
left=$(cd other && echo *.h5)
[[ $rc -eq 0 && $left == ckpt-000000002.h5\ ckpt-000000003.h5 ]] ||
  fail "--overwrite-checkpoints: exit $rc, folder holds '$left'"$'\n'"$out"
grep -q "deleted 2 checkpoint(s) of an earlier run from other (--overwrite-checkpoints)" <<<"$out" ||
  fail "--overwrite-checkpoints does not say what it deleted"$'\n'"$out"
[[ $failures -eq 0 ]] && echo "ok: another run's checkpoints refused, then replaced with --overwrite-checkpoints"

if [[ $failures -gt 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all resume checks passed"
