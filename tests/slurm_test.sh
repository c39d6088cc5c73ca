#!/usr/bin/env bash
# Slurm, end to end: starts a one-node Slurm cluster on this machine (munged, slurmctld and slurmd
# by hand, configuration and state in a temporary folder, two fake GPUs as GRES), submits the
# project's own scripts/slurm/lockstep.sbatch unchanged with sbatch (2 tasks, CPU device, a small
# regression dataset), and checks that:
#   - the job completes with exit code 0 and reports test_mse=;
#   - each task was started by srun --mpi=pmix with the right rank and local rank, saw both GPUs
#     of the node (CUDA_VISIBLE_DEVICES=0,1: the script asks --gpus-per-node, not per task) and
#     took the GPU slot of its local rank, and the launcher and MPI agreed;
#   - a job with --cpus-per-task=2 gives its task 2 cores (since Slurm 22.05 srun needs
#     SRUN_CPUS_PER_TASK for that, which the script sets), on the cluster started again to bind
#     tasks to cores (task/affinity) as clusters do; the rank's launcher line reports its cores.
#   - SIGTERM to the batch script (what --signal=B:TERM sends before the time limit) makes the job
#     checkpoint (--checkpoint-dir), the step exit 75 (stopped early), the job requeue itself and
#     resume, finishing with the same results as the uninterrupted job;
#   - a SIGTERM that arrives when training has already completed (the step exits 0) does not
#     requeue: the job completes once, exit code 0;
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
[[ -x $bin/lockstep-train && -x $bin/lockstep-data ]] || {
  echo "FAIL: lockstep-train or lockstep-data missing in $bin"; exit 1; }

# shellcheck source=tests/helpers/slurm_cluster.sh
source "$src/tests/helpers/slurm_cluster.sh"
slurm_tools "$src" || skip "$SLURM_ERROR"

tmp=$(mktemp -d /tmp/lockstep-slurm.XXXXXX)
chmod 755 "$tmp"  # the job's tasks read the dataset and write here
cleanup() {
  local rc=$?
  set +e
  slurm_stop
  [[ $rc -eq 0 || $rc -eq 77 ]] || slurm_show_logs
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ---- the cluster: this machine as one node ----
host=$(hostname -s)
slurm_node "$host" 127.0.0.1
log "starting munged, slurmctld and slurmd for node $host in $tmp"
slurm_start "$tmp/cluster" || { slurm_show_logs; skip "Slurm does not start here: $SLURM_ERROR"; }
log "cluster up: $(sl sinfo -h -o '%P %a %D %T %N %G')"

# Submits the batch script unchanged: only sbatch options and the trainer's arguments vary (and
# the program run as lockstep-train: SUBMIT_TRAIN, default the build's).
#   submit [SBATCH_OPTION...] -- TRAIN_ARG...   (the options override the defaults here)
submit() {
  local opts=(--ntasks-per-node=2 --cpus-per-task=1 --time=10 --chdir="$tmp" --output="$tmp/job-%j.out")
  [[ $(nproc) -ge 2 ]] || opts+=(--overcommit)
  # The script asks for 4 GPUs per node; this node has 2 fake ones (none where mknod is refused).
  [[ $SLURM_FAKE_GPUS -eq 0 ]] || opts+=(--gpus-per-node="$SLURM_FAKE_GPUS")
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  LOCKSTEP_TRAIN=${SUBMIT_TRAIN:-$bin/lockstep-train} LOCKSTEP_LOG_RANKS=all LOCKSTEP_LOG_LEVEL=debug \
    sl sbatch --parsable "${opts[@]}" "$batch_script" "$@"
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

job=$(submit -- "${train_args[@]}")
log "submitted job $job: sbatch $batch_script ${train_args[*]}"
st=$(slurm_wait_job "$job" "$limit_s")
out=$tmp/job-$job.out
log "job $job: $st, ExitCode=$(slurm_job_field "$job" ExitCode)"
show_output "$job"
check "job $job completed" test "$st" = COMPLETED
check "exit code 0:0" test "$(slurm_job_field "$job" ExitCode)" = "0:0"
check "the job reports test_mse=" grep -q "test_mse=" "$out"
for r in 0 1; do
  check "rank $r was launched by srun as local rank $r of 2" \
    grep -Eq "\[rank $r/2 [^]]*\] launcher: slurm \(Slurm job $job step 0, node 0/1, rank $r/2, local $r/2\)" "$out"
  if [[ $SLURM_FAKE_GPUS -gt 0 ]]; then
    check "rank $r saw both GPUs of the node and takes GPU slot $r" \
      grep -Eq "\[rank $r/2 [^]]*\] launcher: .*CUDA_VISIBLE_DEVICES=0,1[,;].*GPU slot $r of 2 rank" "$out"
  fi
done
check "launcher and MPI agree" bash -c "! grep -q 'disagree' '$out'"
# The final report a user compares: metrics and the fitted parameters' errors.
results() { grep -E '^(test_mse|test_loss|w_max_error|b_error)=' "$1" || true; }
final=$(results "$out")

# ---- requeue on SIGTERM, resume from the checkpoint ----
ckpt=$tmp/ckpt
job2=$(submit -- "${train_args[@]}" --checkpoint-dir "$ckpt")
out2=$tmp/job-$job2.out
log "submitted job $job2 with --checkpoint-dir; SIGTERM to its batch script once it trains"
deadline=$((SECONDS + 120))
until grep -q "^epoch 3/" "$out2" 2>/dev/null || ((SECONDS > deadline)); do sleep 0.1; done
# What --signal=B:TERM@180 sends before the time limit.
sl scancel --batch --signal=TERM "$job2"
st2=$(slurm_wait_job "$job2" "$limit_s")
show_output "$job2"
check "job $job2 completed after a requeue" test "$st2" = COMPLETED
check "job $job2 was restarted once" test "$(slurm_job_field "$job2" Restarts)" = 1
check "the stopped step exited 75" grep -q "training step finished with exit code 75" "$out2"
check "the batch script requeued on SIGTERM" grep -q "stopped early: requeueing" "$out2"
check "the second run resumed from a checkpoint" grep -q "resuming from the newest checkpoint" "$out2"
check "the resumed job's results equal the uninterrupted job's" \
  diff <(echo "$final") <(results "$out2")

# ---- a stop request after training completed: no requeue ----
# The task is a wrapper that trains, then marks that training is done and lingers (ignoring the
# forwarded SIGUSR1 meanwhile), so the SIGTERM lands, deterministically, after a completed run.
wrapper=$tmp/train-then-linger.sh
cat >"$wrapper" <<WRAP
#!/usr/bin/env bash
"$bin/lockstep-train" "\$@"
rc=\$?
trap 'echo "wrapper: SIGUSR1 after training completed"' USR1
touch "$tmp/trained.\${SLURM_PROCID:-0}"
for _ in \$(seq 100); do sleep 0.1; done
exit \$rc
WRAP
chmod 755 "$wrapper"
short_args=("${train_args[@]/#80/2}")  # --epochs 80 -> 2
job3=$(SUBMIT_TRAIN=$wrapper submit -- "${short_args[@]}" --checkpoint-dir "$tmp/ckpt3")
out3=$tmp/job-$job3.out
log "submitted job $job3; SIGTERM to its batch script once training has completed"
deadline=$((SECONDS + 120))
until [[ -e $tmp/trained.0 && -e $tmp/trained.1 ]] || ((SECONDS > deadline)); do sleep 0.1; done
sl scancel --batch --signal=TERM "$job3"
st3=$(slurm_wait_job "$job3" "$limit_s")
show_output "$job3"
check "job $job3 completed" test "$st3" = COMPLETED
check "job $job3 was not restarted" test "$(slurm_job_field "$job3" Restarts)" = 0
check "job $job3 exit code 0:0" test "$(slurm_job_field "$job3" ExitCode)" = "0:0"
check "the batch script said why it did not requeue" \
  grep -q "not requeueing: training had completed" "$out3"

# ---- --cpus-per-task reaches the tasks ----
# Unbound (task/none, above) every task may run on every core, whatever it was given; so the
# cluster starts again binding tasks to their cores. Only here: ranks bound to a core each train
# the jobs above too fast for their SIGTERM to land mid-run. One task: this node's 2 cores are all
# a task of 2 CPUs can get here. Without SRUN_CPUS_PER_TASK srun (22.05 and later) gives the step
# one CPU per task, and the bound task sees 1 core.
if [[ $(nproc) -ge 2 ]]; then
  slurm_stop || true  # its kills of ended daemons fail, as they may (set -e is off within)
  # shellcheck disable=SC2034  # read by slurm_start
  SLURM_TASK_PLUGIN=task/affinity SLURM_TASK_PLUGIN_PARAM=cores
  log "starting the cluster again, binding tasks to cores (task/affinity)"
  slurm_start "$tmp/cluster-bound" || { slurm_show_logs; echo "FAIL: $SLURM_ERROR"; exit 1; }
  # Job ids start again at 1: its own output file.
  job4=$(submit --ntasks-per-node=1 --cpus-per-task=2 --output="$tmp/job-bound-%j.out" -- \
    "${short_args[@]}")
  st4=$(slurm_wait_job "$job4" "$limit_s")
  out4=$tmp/job-bound-$job4.out
  show_output "bound-$job4"
  check "job $job4 (--cpus-per-task=2) completed" test "$st4" = COMPLETED
  check "its rank has the 2 cores it asked for" \
    grep -Eq "launcher: slurm \(Slurm job $job4 step 0.*; 2 usable cores\$" "$out4"
else
  log "not checked: --cpus-per-task=2 needs 2 cores, this machine has $(nproc)"
fi

if [[ $fails -ne 0 ]]; then
  echo "FAIL: $fails check(s) failed"
  exit 1
fi
echo "PASS"
