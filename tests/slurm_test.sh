#!/usr/bin/env bash
# Slurm, end to end: starts a one-node Slurm cluster on this machine (munged, slurmctld and slurmd
# by hand, configuration and state in a temporary folder, two fake GPUs as GRES), submits the
# project's own scripts/slurm/lockstep.sbatch unchanged with sbatch (2 tasks, CPU device, a small
# regression dataset), and checks that:
#   - the job completes with exit code 0 and reports test_mse=;
#   - each task was started by srun --mpi=pmix with the right rank and local rank, saw only its own
#     GPU (CUDA_VISIBLE_DEVICES 0 and 1, --gpus-per-task=1) and so took GPU slot 0, and the
#     launcher and MPI agreed;
#   - SIGTERM to the batch script (what --signal=B:TERM sends before the time limit) makes the job
#     checkpoint (--checkpoint-dir), requeue itself and resume, finishing with the same results as
#     the uninterrupted job;
#   - lockstep-multinode.sbatch runs the same body.
# The daemons are stopped by their pids on every exit. Exit 77 (skipped) only when Slurm cannot run
# here for a reason outside the project (not root, packages unavailable, daemons refused to start).
set -euo pipefail

bin=${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}
src=${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}
batch_script=$src/scripts/slurm/lockstep.sbatch
limit_s=${SLURM_TEST_JOB_LIMIT_S:-300}

skip() { echo "SKIP: $*"; exit 77; }
log() { echo "[slurm_test $(date +%T)] $*"; }

[[ $(id -u) -eq 0 ]] || skip "slurmd must run as root to start jobs, and this test runs as $(id -un)"
for tool in munged slurmctld slurmd sbatch scontrol squeue scancel; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    log "$tool missing: installing Slurm and munge (scripts/setup.sh --test)"
    bash "$src/scripts/setup.sh" --test || skip "cannot install slurmctld/slurmd/slurm-client/munge"
    break
  fi
done
for tool in munged slurmctld slurmd sbatch scontrol squeue scancel; do
  command -v "$tool" >/dev/null 2>&1 || skip "$tool is not installed"
done
[[ -x $bin/lockstep-train && -x $bin/lockstep-data ]] || {
  echo "FAIL: lockstep-train or lockstep-data missing in $bin"; exit 1; }

tmp=$(mktemp -d /tmp/lockstep-slurm.XXXXXX)
chmod 755 "$tmp"  # the job's tasks read the dataset and write here
pids=()
cleanup() {
  local rc=$?
  set +e
  if [[ -f $tmp/slurm.conf ]] && [[ ${#pids[@]} -gt 0 ]]; then
    # Cancel what is left, so no job step outlives its daemons.
    local jobs
    jobs=$(squeue -h -o %i 2>/dev/null)
    if [[ -n "$jobs" ]]; then
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null
      for _ in $(seq 20); do [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break; sleep 1; done
    fi
  fi
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then
    for f in "$tmp"/log/*.log; do echo "---- $f (last lines)"; tail -n 15 "$f"; done
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Daemon logs, shown when the cluster cannot start.
show_logs() { for f in "$tmp"/log/*.log; do echo "---- $f"; tail -n 20 "$f"; done; }

# A free TCP port: random in 20000-59999 and not listened on.
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 40000))
    if ! ss -Htln "sport = :$p" 2>/dev/null | grep -q .; then echo "$p"; return; fi
  done
  echo 0
}

# ---- the cluster ----
mkdir -p "$tmp"/{state,spool,log,dev}
host=$(hostname -s)
munge_sock=$tmp/munge.sock
dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge.key"
# Two fake GPUs: gres/gpu wants character devices; Slurm only uses them to number the GPUs and
# set CUDA_VISIBLE_DEVICES (no cgroups here). Without mknod the node has no GPUs.
gres_node="" gres_types=""
if mknod "$tmp/dev/nvidia0" c 1 3 2>/dev/null && mknod "$tmp/dev/nvidia1" c 1 3 2>/dev/null; then
  gres_node="Gres=gpu:2" gres_types="GresTypes=gpu"
  echo "NodeName=$host Name=gpu File=$tmp/dev/nvidia[0-1]" >"$tmp/gres.conf"
fi
ctld_port=$(free_port) d_port=$(free_port)
[[ $ctld_port -ne 0 && $d_port -ne 0 && $ctld_port -ne $d_port ]] || skip "no free TCP port"
touch "$tmp/plugstack.conf"
cat >"$tmp/slurm.conf" <<EOF
ClusterName=lockstep-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/munge
# cred_expire also sets how long a requeued job waits before it starts again (default 120 s).
AuthInfo=socket=$munge_sock,cred_expire=10
CredType=cred/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobRequeue=1
$gres_types
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
PlugStackConfig=$tmp/plugstack.conf
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
ReturnToService=2
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=1000 $gres_node State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$tmp/slurm.conf

log "starting munged, slurmctld and slurmd for host $host (ports $ctld_port, $d_port) in $tmp"
munged -F --key-file="$tmp/munge.key" --socket="$munge_sock" --pid-file="$tmp/munged.pid" \
  --seed-file="$tmp/munge.seed" --log-file="$tmp/log/munged.log" >>"$tmp/log/munged.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [[ -S $munge_sock ]] && break; sleep 0.1; done
[[ -S $munge_sock ]] || { show_logs; skip "munged did not start"; }
slurmctld -D -f "$SLURM_CONF" >>"$tmp/log/slurmctld.log" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$host" >>"$tmp/log/slurmd.log" 2>&1 &
pids+=($!)
ready=0
for _ in $(seq 60); do
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || { show_logs; skip "a Slurm daemon exited at start"; }; done
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
  [[ $state == idle ]] && { ready=1; break; }
  sleep 0.5
done
[[ $ready -eq 1 ]] || { show_logs; skip "the node did not become idle within 30 s (state '$state')"; }
log "cluster up: $(sinfo -h -o '%P %a %D %T %N')"

# ---- a job ----
job_state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
job_field() { scontrol show job "$1" 2>/dev/null | grep -o "$2=[^ ]*" | head -1 | cut -d= -f2; }

# Waits until job $1 has ended (bounded); prints its final state.
wait_job() {
  local id=$1 deadline=$((SECONDS + limit_s)) st
  while ((SECONDS < deadline)); do
    st=$(job_state "$id")
    case "$st" in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
        echo "$st"; return ;;
    esac
    sleep 1
  done
  echo "STILL_${st:-UNKNOWN}_AFTER_${limit_s}s"
}

# Submits the batch script unchanged: only sbatch options and the trainer's arguments vary.
submit() {
  local extra=()
  [[ $(nproc) -ge 2 ]] || extra+=(--overcommit)
  LOCKSTEP_TRAIN=$bin/lockstep-train LOCKSTEP_LOG_RANKS=all \
    sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 "${extra[@]}" --time=10 \
    --chdir="$tmp" --output="$tmp/job-%j.out" "$batch_script" "$@"
}

log "making the dataset"
"$bin/lockstep-data" regression --out "$tmp/reg.h5" --samples 2048 --features 16 --noise 0.05 \
  --seed 5 >/dev/null
# Long enough (a few seconds) for the requeue check to signal it mid-run.
train_args=(--data "$tmp/reg.h5" --model linear --device cpu --global-batch 32 --lr 0.01
  --epochs 80 --seed 11 --timeout 60 --progress lines --log-every 100000)

# A job's output without the per-epoch lines.
show_output() {
  echo "---- job $1 output (epoch lines left out)"
  grep -Ev '^epoch [0-9]+/[0-9]+[ :]' "$tmp/job-$1.out" 2>/dev/null || echo "(no output file)"
  echo "----"
}

fails=0
check() {  # check "what" command...: runs the command, reports
  local what=$1; shift
  if "$@"; then log "ok: $what"; else log "FAILED: $what"; fails=$((fails + 1)); fi
}

# The multi-node script is the same job with other #SBATCH lines: what runs here covers its body.
body() { sed -n '/^# ---- body/,$p' "$1"; }
check "lockstep-multinode.sbatch has lockstep.sbatch's body" \
  diff <(body "$batch_script") <(body "$src/scripts/slurm/lockstep-multinode.sbatch")

job=$(submit "${train_args[@]}")
log "submitted job $job: sbatch $batch_script ${train_args[*]}"
st=$(wait_job "$job")
out=$tmp/job-$job.out
log "job $job: $st, ExitCode=$(job_field "$job" ExitCode)"
show_output "$job"
check "job $job completed" test "$st" = COMPLETED
check "exit code 0:0" test "$(job_field "$job" ExitCode)" = "0:0"
check "the job reports test_mse=" grep -q "test_mse=" "$out"
for r in 0 1; do
  check "rank $r was launched by srun as local rank $r of 2" \
    grep -Eq "\[rank $r/2 [^]]*\] launcher: slurm \(Slurm job $job step 0, node 0/1, rank $r/2, local $r/2\)" "$out"
  if [[ -n $gres_node ]]; then
    check "rank $r saw only its own GPU ($r) and takes GPU slot 0" \
      grep -Eq "\[rank $r/2 [^]]*\] launcher: .*CUDA_VISIBLE_DEVICES=$r,.*GPU slot 0 of 1 rank" "$out"
  fi
done
check "launcher and MPI agree" bash -c "! grep -q 'disagree' '$out'"
# The final report a user compares: metrics and the fitted parameters' errors.
results() { grep -E '^(test_mse|test_loss|w_max_error|b_error)=' "$1" || true; }
final=$(results "$out")

# ---- requeue on SIGTERM, resume from the checkpoint ----
ckpt=$tmp/ckpt
job2=$(submit "${train_args[@]}" --checkpoint-dir "$ckpt")
out2=$tmp/job-$job2.out
log "submitted job $job2 with --checkpoint-dir; SIGTERM to its batch script once it trains"
deadline=$((SECONDS + 120))
until grep -q "^epoch 3/" "$out2" 2>/dev/null || ((SECONDS > deadline)); do sleep 0.1; done
# What --signal=B:TERM@180 sends before the time limit.
scancel --batch --signal=TERM "$job2"
st2=$(wait_job "$job2")
show_output "$job2"
check "job $job2 completed after a requeue" test "$st2" = COMPLETED
check "job $job2 was restarted once" test "$(job_field "$job2" Restarts)" = 1
check "the batch script requeued on SIGTERM" grep -q "requeueing" "$out2"
check "the second run resumed from a checkpoint" grep -q "resuming from the newest checkpoint" "$out2"
check "the resumed job's results equal the uninterrupted job's" \
  diff <(echo "$final") <(results "$out2")

if [[ $fails -ne 0 ]]; then
  echo "FAIL: $fails check(s) failed"
  exit 1
fi
echo "PASS"
