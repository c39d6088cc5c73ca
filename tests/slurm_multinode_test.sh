#!/usr/bin/env bash
# Slurm across two nodes, end to end: two network namespaces joined by a veth pair are two cluster
# nodes (own addresses and host names), each with its own slurmd and two fake GPUs; the controller
# runs beside the first. The project's scripts/slurm/lockstep-multinode.sbatch is submitted
# unchanged (2 nodes x 2 tasks, CPU device, LOCKSTEP_IFACE naming the nodes' link) and the test
# checks that:
#   - the job completes with exit code 0;
#   - ranks 0-1 run on the first node and 2-3 on the second, each as the right local rank, node
#     and GPU (both GPUs of its node visible, CUDA_VISIBLE_DEVICES=0,1, and the GPU slot of its
#     local rank), and the launcher and MPI agree;
#   - the results equal those of the same 4 ranks on one host (mpiexec).
# Daemons and namespaces are removed on every exit. Exit 77 (skipped) only when Slurm or network
# namespaces cannot run here for a reason outside the project.
set -euo pipefail

bin=${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}
src=${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}
mpiexec=${MPIEXEC:-mpiexec}
batch_script=$src/scripts/slurm/lockstep-multinode.sbatch
limit_s=${SLURM_TEST_JOB_LIMIT_S:-300}

skip() { echo "SKIP: $*"; exit 77; }
log() { echo "[slurm_multinode_test $(date +%T)] $*"; }

[[ $(id -u) -eq 0 ]] || skip "slurmd and network namespaces need root; this test runs as $(id -un)"
[[ -x $bin/lockstep-train && -x $bin/lockstep-data ]] || {
  echo "FAIL: lockstep-train or lockstep-data missing in $bin"; exit 1; }
for tool in ip nsenter unshare; do command -v $tool >/dev/null || skip "$tool is not installed"; done

# shellcheck source=tests/helpers/slurm_cluster.sh
source "$src/tests/helpers/slurm_cluster.sh"
# shellcheck source=tests/helpers/netns_hosts.sh
source "$src/tests/helpers/netns_hosts.sh"
slurm_tools "$src" || skip "$SLURM_ERROR"

tmp=$(mktemp -d /tmp/lockstep-slurm-mn.XXXXXX)
chmod 755 "$tmp"
cleanup() {
  local rc=$?
  set +e
  slurm_stop
  [[ $rc -eq 0 || $rc -eq 77 ]] || slurm_show_logs
  netns_hosts_destroy
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ---- two nodes ----
netns_hosts_create $$ || skip "cannot create network namespaces here: $NETNS_ERROR"
for i in 0 1; do slurm_node "${HOST_NAME[i]}" "${HOST_IP[i]}" "$i"; done
log "starting munged, slurmctld and slurmd on ${HOST_NAME[0]} and ${HOST_NAME[1]} in $tmp"
slurm_start "$tmp/cluster" || { slurm_show_logs; skip "Slurm does not start here: $SLURM_ERROR"; }
log "cluster up: $(sl sinfo -h -o '%P %a %D %T %N %G')"

log "dataset, and the one-host reference (4 ranks)"
"$bin/lockstep-data" regression --out "$tmp/reg.h5" --samples 2048 --features 16 --noise 0.05 \
  --seed 5 >/dev/null
train_args=(--data "$tmp/reg.h5" --model linear --device cpu --global-batch 32 --lr 0.01
  --epochs 4 --seed 11 --timeout 60 --progress lines --log-every 100000)
timeout 120 "$mpiexec" -n 4 --oversubscribe "$bin/lockstep-train" "${train_args[@]}" \
  >"$tmp/one.out" 2>"$tmp/one.err" || { cat "$tmp/one.err"; echo "FAIL: the one-host run failed"; exit 1; }
results() { sed -nE 's/^(epoch [0-9]+\/[0-9]+: train_loss=[^ ]* test_loss=[^ ]*).*/\1/p; /^(test_mse|test_loss|w_max_error|b_error)=/p' "$1"; }

fails=0
check() {
  local what=$1
  shift
  if "$@"; then log "ok: $what"; else log "FAILED: $what"; fails=$((fails + 1)); fi
}

# The script asks for 4 GPUs per node; these nodes have 2 fake ones (none where mknod is refused).
gpus=()
[[ $SLURM_FAKE_GPUS -eq 0 ]] || gpus=(--gpus-per-node="$SLURM_FAKE_GPUS")
# The nodes share this machine's cores: ranks must yield while they wait, or TCP starves.
job=$(LOCKSTEP_TRAIN=$bin/lockstep-train LOCKSTEP_LOG_RANKS=all LOCKSTEP_LOG_LEVEL=debug LOCKSTEP_IFACE=$HOST_IFACE \
  OMPI_MCA_mpi_yield_when_idle=1 sl sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 "${gpus[@]}" \
  --time=10 --chdir="$tmp" --output="$tmp/job-%j.out" "$batch_script" "${train_args[@]}")
log "submitted job $job: sbatch --ntasks-per-node=2 ${gpus[*]} $batch_script ${train_args[*]}"
st=$(slurm_wait_job "$job" "$limit_s")
out=$tmp/job-$job.out
log "job $job: $st, ExitCode=$(slurm_job_field "$job" ExitCode), NodeList=$(slurm_job_field "$job" NodeList)"
echo "---- job $job output (epoch lines left out)"
grep -Ev '^epoch [0-9]+/[0-9]+[ :]' "$out" 2>/dev/null || echo "(no output file)"
echo "----"
check "job $job completed" test "$st" = COMPLETED
check "exit code 0:0" test "$(slurm_job_field "$job" ExitCode)" = "0:0"
for r in 0 1 2 3; do
  node=$((r / 2)) local=$((r % 2))
  check "rank $r runs on ${HOST_NAME[node]} (node $node/2) as local rank $local of 2" grep -Eq \
    "^\[rank $r/4 ${HOST_NAME[node]}\] launcher: slurm \(Slurm job $job step 0, node $node/2, rank $r/4, local $local/2\)" \
    "$out"
  if [[ $SLURM_FAKE_GPUS -gt 0 ]]; then
    check "rank $r saw both GPUs of its node and takes GPU slot $local" grep -Eq \
      "^\[rank $r/4 [^]]*\] launcher: .*CUDA_VISIBLE_DEVICES=0,1[,;].*MPI: 4 rank\(s\), 2 on this host; GPU slot $local of 2 rank" \
      "$out"
  fi
done
check "launcher and MPI agree" bash -c "! grep -q disagree '$out'"
check "results are there" grep -q '^test_mse=' "$out"
check "two nodes give the one-host results" diff <(results "$tmp/one.out") <(results "$out")

if [[ $fails -ne 0 ]]; then
  echo "FAIL: $fails check(s) failed"
  exit 1
fi
echo "PASS"
