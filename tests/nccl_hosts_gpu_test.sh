#!/usr/bin/env bash
# lockstep-train over NCCL with a live peer, end to end: two ranks on one machine, each given its
# own NCCL_HOSTID, so that NCCL treats them as two hosts and connects them over its network
# transport (sockets on loopback), sharing the GPU (or each on its own where there are two).
#  - Lockstep's one-GPU-per-rank check still refuses two ranks on one GPU over NCCL; the test
#    switch LOCKSTEP_TEST_ONLY_NCCL_SHARES_GPU=1 lets them, and they train to the end (exit 0,
#    backend nccl, 2 ranks);
#  - rank 1 stopped (SIGSTOP) while training: rank 0 gives up within --timeout + 10 s with a
#    message naming itself and the collective it waited in, and the job ends non-zero;
#  - rank 1 killed (kill -9): the job ends non-zero within --timeout + 15 s;
#  - rank 1 failing with its replayed step in flight while rank 0 has not launched (test hook):
#    the job ends within --timeout + 15 s, not when rank 0 launches 30 s later.
# Skipped, with the reason, where the build has no CUDA or no GPU answers. ctest sets LOCKSTEP_BIN
# and MPIEXEC.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-train lockstep-data

e2e_workdir nccl-hosts
cd "$work" || exit 1
export NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none

"$bin/lockstep-data" regression --out reg.h5 --samples 8000 --features 16 >/dev/null 2>&1 ||
  { echo "FAIL: lockstep-data regression"; exit 1; }

# nccl_job [ENV=VALUE...] -- ARGS...: lockstep-train at 2 ranks over NCCL, each rank its own
# NCCL_HOSTID; the ENV pairs go to every rank.
nccl_job() {
  local env=()
  while [[ $1 != -- ]]; do env+=(-x "$1"); shift; done
  shift
  timeout 180 "$mpiexec" -n 2 --oversubscribe "${env[@]}" -x NCCL_IB_DISABLE -x NCCL_SOCKET_IFNAME \
    sh -c 'NCCL_HOSTID=lockstep-e2e-$OMPI_COMM_WORLD_RANK exec "$0" "$@"' \
    "$bin/lockstep-train" --device cuda --data reg.h5 --model mlp:64 --global-batch 64 "$@"
}

# --- the check refuses, the switch allows, and the run completes ---
out=$(nccl_job -- --steps 20 --progress none 2>&1)
rc=$?
if [[ $rc -eq 2 ]] && grep -qE "built without CUDA|no CUDA device|not built into this binary" <<<"$out"; then
  echo "skipped: $(grep -m1 -oE "(built without CUDA|no CUDA device|the NCCL backend is not built).*" <<<"$out")"
  exit 77
fi
gpus=$(grep -m1 -oE 'see the same [0-9]+ GPU' <<<"$out" | grep -oE '[0-9]+')
if [[ -n $gpus ]]; then
  [[ $rc -eq 2 ]] || fail "two ranks on one GPU over NCCL without the switch: exit $rc, expected 2"
  echo "ok: without the test switch two ranks on one GPU are refused: $(grep -m1 -o 'host .*GPU(s)' <<<"$out")"
fi
out=$(nccl_job LOCKSTEP_TEST_ONLY_NCCL_SHARES_GPU=1 -- --steps 200 --progress lines --log-every 50 2>&1)
rc=$?
if [[ $rc -ne 0 ]]; then
  fail "2 NCCL ranks: exit $rc"$'\n'"$out"
  exit 1
fi
grep -qE '2 rank.*nccl|nccl.*2 rank' <<<"$out" || fail "the run header names no 2 NCCL ranks"$'\n'"$out"
echo "ok: 2 NCCL ranks trained 200 steps: $(grep -m1 -iE 'samples/s|samples_per_second' <<<"$out")"

# start_long TIMEOUT: a long 2-rank NCCL run in the background (job pid in $job, log long.log),
# once it has written its first checkpoint.
start_long() {
  rm -rf ck long.log
  nccl_job LOCKSTEP_TEST_ONLY_NCCL_SHARES_GPU=1 -- --steps 1000000 --progress none \
    --checkpoint-every 100 --checkpoint-dir ck --timeout "$1" >long.log 2>&1 &
  job=$!
  e2e_wait_for_checkpoint ck
}
# hit_rank1 SIGNAL: sends SIGNAL to rank 1, waits for the job; sets rc, took (ms) and out.
hit_rank1() {
  local victim start
  victim=$(e2e_rank_pid "$job" 1)
  if [[ -z $victim ]]; then
    fail "could not find rank 1"
    kill "$job" 2>/dev/null
    return 1
  fi
  start=$(date +%s%N)
  kill "-$1" "$victim"
  wait "$job"
  rc=$?
  took=$(( ($(date +%s%N) - start) / 1000000 ))
  kill -KILL "$victim" 2>/dev/null
  out=$(cat long.log)
}

# --- rank 1 stalled: rank 0 times out naming itself and the collective ---
timeout_s=5
if ! start_long $timeout_s; then
  fail "the run to stall never wrote its first checkpoint"$'\n'"$(cat long.log)"
elif hit_rank1 STOP; then
  before=$failures
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "with rank 1 stopped the job exited $rc"$'\n'"$out"
  [[ $took -le $(( (timeout_s + 10) * 1000 )) ]] ||
    fail "the job ended ${took} ms after rank 1 stopped (--timeout $timeout_s s, bound +10 s)"$'\n'"$out"
  grep -qE "\[rank 0/2 [^]]*\] .*did not complete within $timeout_s s" <<<"$out" ||
    fail "rank 0 did not name itself and the wait it gave up"$'\n'"$out"
  [[ $failures -eq $before ]] &&
    echo "ok: rank 1 stopped: exit $rc after ${took} ms: $(grep -m1 'did not complete' <<<"$out" | cut -c1-200)"
fi

# --- rank 1 killed: the job ends ---
timeout_s=5
if ! start_long $timeout_s; then
  fail "the run to kill never wrote its first checkpoint"$'\n'"$(cat long.log)"
elif hit_rank1 KILL; then
  before=$failures
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "after kill -9 of rank 1 the job exited $rc"$'\n'"$out"
  [[ $took -le $(( (timeout_s + 15) * 1000 )) ]] || fail "the job took ${took} ms to end after kill -9"$'\n'"$out"
  [[ $failures -eq $before ]] && echo "ok: rank 1 killed: exit $rc after ${took} ms: $(grep -m1 -E 'rank 1|did not complete|signal 9' <<<"$out" | cut -c1-200)"
fi

# --- rank 1 fails with its replayed step in flight, rank 0 not launched yet (test hook) ---
# Rank 1's graph waits on the device for rank 0's collectives; unwinding, it waits for the stream
# as for a collective (--timeout, then NCCL's abort) instead of synchronising it for ever.
timeout_s=5
start=$(date +%s%N)
out=$(nccl_job LOCKSTEP_TEST_ONLY_NCCL_SHARES_GPU=1 LOCKSTEP_TEST_LAUNCH_FAULT=20 -- --steps 100 \
      --progress none --timeout $timeout_s 2>&1)
rc=$?
took=$(( ($(date +%s%N) - start) / 1000000 ))
before=$failures
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "rank 1 failing with its replay in flight: exit $rc"$'\n'"$out"
grep -q "LOCKSTEP_TEST_LAUNCH_FAULT" <<<"$out" || fail "no message from the failing rank"$'\n'"$out"
# Rank 0 sleeps 30 s before its launch: a rank 1 that synchronised its stream would wait for it.
[[ $took -le $(( (timeout_s + 15) * 1000 )) ]] ||
  fail "the job took ${took} ms to end (rank 0 would have launched after 30 s)"$'\n'"$out"
[[ $failures -eq $before ]] && echo "ok: rank 1 failed with its replay in flight: exit $rc after ${took} ms"

[[ $failures -eq 0 ]] || exit 1
echo "PASS"
