#!/usr/bin/env bash
# Two hosts, end to end: two network namespaces joined by a veth pair play two cluster nodes
# (each with its own host name), and scripts/launch-mpirun.sh starts lockstep-train on them with
# Open MPI over TCP (an rsh agent that enters the other namespace stands in for ssh), 2 ranks per
# host. Checks that:
#   - every rank knows its host and local rank (hosts A and B, local 0 and 1 on each), and the
#     launcher and MPI agree;
#   - training completes and its results (per-epoch losses, final metrics, parameter errors) equal
#     those of the same 4 ranks on one host;
#   - taking the link down mid-run makes every rank exit within a bound (--timeout 10), a rank on
#     each host with the communicator's timeout error;
#   - the ranks on the other host, which starts with a fresh environment as over ssh, get PATH,
#     LD_LIBRARY_PATH and CUDA_* from the launching host, but not its CUDA_VISIBLE_DEVICES; and
#     launch-mpirun.sh --dry-run shows them passed on (-x), and warns when the default ranks per
#     node came from a host without GPUs (a fake nvidia-smi stands for both kinds of host).
# Bounded by a watchdog; namespaces and their processes are removed on every exit. Exit 77
# (skipped) only when network namespaces cannot be created here.
set -euo pipefail

bin=${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}
src=${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}
mpiexec=${MPIEXEC:-mpiexec}
limit_s=${TWO_HOST_TEST_LIMIT_S:-240}
collective_timeout=10

skip() { echo "SKIP: $*"; exit 77; }
log() { echo "[two_host_test $(date +%T)] $*"; }

[[ $(id -u) -eq 0 ]] || skip "creating network namespaces needs root; this test runs as $(id -un)"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
[[ -x $bin/lockstep-train && -x $bin/lockstep-data ]] || {
  echo "FAIL: lockstep-train or lockstep-data missing in $bin"; exit 1; }

tmp=$(mktemp -d /tmp/lockstep-two-host.XXXXXX)
chmod 755 "$tmp"
# shellcheck source=tests/helpers/netns_hosts.sh
source "$src/tests/helpers/netns_hosts.sh"
watchdog=""
cleanup() {
  local rc=$?
  set +e
  # shellcheck disable=SC2046
  [[ -z $watchdog ]] || kill $(pgrep -P "$watchdog") "$watchdog" 2>/dev/null
  netns_hosts_destroy
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "FAIL: interrupted or over the ${limit_s} s bound"; exit 1' INT TERM
(sleep "$limit_s" && kill -TERM $$) </dev/null >/dev/null 2>&1 &
watchdog=$!

# ---- two hosts ----
netns_hosts_create $$ || skip "cannot create network namespaces here: $NETNS_ERROR"
ns_a=${HOST_NS[0]} ns_b=${HOST_NS[1]} name_a=${HOST_NAME[0]} name_b=${HOST_NAME[1]}
ip_a=${HOST_IP[0]} ip_b=${HOST_IP[1]} iface=$HOST_IFACE

# mpirun's rsh agent: "agent [options] HOST COMMAND..." runs COMMAND on HOST as ssh would.
cat >"$tmp/agent.sh" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1
shift
case "\$host" in
  $ip_a | $name_a) ns=$ns_a name=$name_a ;;
  $ip_b | $name_b) ns=$ns_b name=$name_b ;;
  *) echo "agent: unknown host \$host" >&2; exit 255 ;;
esac
# Like ssh, a fresh environment on the other host: what its ranks get from this one is only what
# mpirun passes on.
exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \\
  nsenter --net="/var/run/netns/\$ns" unshare --uts sh -c "hostname \$name && \$*"
EOF
chmod +x "$tmp/agent.sh"
printf '%s slots=2\n%s slots=2\n' "$ip_a" "$ip_b" >"$tmp/hosts"

export OMPI_MCA_plm_rsh_agent=$tmp/agent.sh OMPI_MCA_btl=self,tcp
# Both "hosts" share this machine's cores: without yielding, 4 busy-polling ranks starve TCP.
export OMPI_MCA_mpi_yield_when_idle=1

# launch SECONDS COMMAND...: starts COMMAND on both hosts from host A through the project's
# launcher, for at most SECONDS.
launch() {
  local limit=$1
  shift
  on_host 0 timeout "$limit" "$src/scripts/launch-mpirun.sh" \
    --hostfile "$tmp/hosts" --ranks-per-node 2 --iface $iface --host-timeout 30 "$@"
}

fails=0
check() {
  local what=$1
  shift
  if "$@"; then log "ok: $what"; else log "FAILED: $what"; fails=$((fails + 1)); fi
}

log "dataset"
"$bin/lockstep-data" regression --out "$tmp/reg.h5" --samples 2048 --features 16 --noise 0.05 \
  --seed 5 >/dev/null
train=("$bin/lockstep-train" --data "$tmp/reg.h5" --model linear --device cpu --global-batch 32
  --lr 0.05 --seed 11 --timeout "$collective_timeout" --progress lines --log-every 100000)

# The results a user compares: epoch losses (without timings), final metrics.
results() { sed -nE 's/^(epoch [0-9]+\/[0-9]+: train_loss=[^ ]* test_loss=[^ ]*).*/\1/p; /^(test_mse|test_loss|w_max_error|b_error)=/p' "$1"; }

# ---- the environment passed on ----
log "launch-mpirun --dry-run: the variables passed on, the ranks-per-node warning"
mkdir "$tmp/no-gpu" "$tmp/two-gpus"
printf '#!/bin/sh\nexit 0\n' >"$tmp/no-gpu/nvidia-smi"
printf '#!/bin/sh\necho "GPU 0: fake"; echo "GPU 1: fake"\n' >"$tmp/two-gpus/nvidia-smi"
chmod +x "$tmp/no-gpu/nvidia-smi" "$tmp/two-gpus/nvidia-smi"
lib_dir=/opt/lockstep-two-host-test/lib
# dry FAKE_BIN: a dry run as from a host whose nvidia-smi is FAKE_BIN's; stdout to dry.out,
# stderr to dry.err.
dry() {
  PATH=$tmp/$1:$PATH LD_LIBRARY_PATH=$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    CUDA_MODULE_LOADING=LAZY CUDA_VISIBLE_DEVICES=1 \
    "$src/scripts/launch-mpirun.sh" --dry-run --hostfile "$tmp/hosts" -- "$bin/lockstep-train" \
    >"$tmp/dry.out" 2>"$tmp/dry.err"
}
dry no-gpu
echo "---- dry run, from a host without GPUs"
cat "$tmp/dry.out" "$tmp/dry.err"
echo "----"
for var in LD_LIBRARY_PATH PATH CUDA_MODULE_LOADING; do
  check "the dry run passes $var on" grep -q -- "-x $var " "$tmp/dry.out"
done
check "the dry run does not pass CUDA_VISIBLE_DEVICES on" \
  bash -c "! grep -q -- '-x CUDA_VISIBLE_DEVICES' '$tmp/dry.out'"
check "one rank per node from a host without GPUs, and one line of warning that says so" \
  eval "grep -q -- '--map-by ppr:1:node' '$tmp/dry.out' && test \$(wc -l <'$tmp/dry.err') -eq 1 &&
        grep -q 'no GPU on this host.*--ranks-per-node' '$tmp/dry.err'"
dry two-gpus
check "two ranks per node from a host with two GPUs, without a warning" \
  eval "grep -q -- '--map-by ppr:2:node' '$tmp/dry.out' && test ! -s '$tmp/dry.err'"

log "what the ranks on each host get"
# shellcheck disable=SC2016  # expanded by each rank's shell
LD_LIBRARY_PATH=$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} CUDA_MODULE_LOADING=LAZY \
  CUDA_VISIBLE_DEVICES=1 launch 60 sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname):" \
    "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-unset} CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-unset}" \
    "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset} PATH=$PATH"' >"$tmp/env.out" 2>&1 || true
cat "$tmp/env.out"
for r in 2 3; do
  check "rank $r on $name_b has LD_LIBRARY_PATH, CUDA_MODULE_LOADING and PATH, not CUDA_VISIBLE_DEVICES" \
    grep -qxF "rank $r on $name_b: LD_LIBRARY_PATH=$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} CUDA_MODULE_LOADING=LAZY CUDA_VISIBLE_DEVICES=unset PATH=$PATH" \
    "$tmp/env.out"
done

# ---- reference: the same 4 ranks on one host ----
log "4 ranks on one host"
timeout 120 "$mpiexec" -n 4 --oversubscribe "${train[@]}" --epochs 4 >"$tmp/one.out" 2>"$tmp/one.err" || {
  cat "$tmp/one.err"; echo "FAIL: the one-host run failed"; exit 1; }

# ---- the same on two hosts ----
log "4 ranks on two hosts ($name_a=$ip_a, $name_b=$ip_b)"
set +e
LOCKSTEP_LOG_RANKS=all LOCKSTEP_LOG_LEVEL=debug launch 120 "${train[@]}" --epochs 4 >"$tmp/two.out" 2>"$tmp/two.err"
rc=$?
set -e
echo "---- two hosts: stderr"
cat "$tmp/two.err"
echo "---- two hosts: results"
results "$tmp/two.out"
echo "----"
check "the two-host run exits 0" test $rc -eq 0
for r in 0 1 2 3; do
  host=$name_a
  [[ $r -lt 2 ]] || host=$name_b
  check "rank $r runs on $host as local rank $((r % 2)) of 2" grep -Eq \
    "^\[rank $r/4 $host\] launcher: openmpi \(rank $r/4, local $((r % 2))/2\).*MPI: 4 rank\(s\), 2 on this host" \
    "$tmp/two.err"
done
check "launcher and MPI agree" bash -c "! grep -q disagree '$tmp/two.err'"
check "results are there" grep -q '^test_mse=' "$tmp/two.out"
check "two hosts give the one-host results" diff <(results "$tmp/one.out") <(results "$tmp/two.out")

# ---- the link goes down mid-run ----
log "link down mid-run: every rank must stop within ${collective_timeout} s + slack"
# Each rank keeps its own stderr in a file: host B's output cannot reach mpirun once the link is down.
# shellcheck disable=SC2016  # expanded by each rank's shell
launch 180 sh -c 'exec "$0" "$@" 2>"'"$tmp"'/down-rank-$OMPI_COMM_WORLD_RANK.err"' \
  "${train[@]}" --epochs 100000 >"$tmp/down.out" 2>"$tmp/down.err" &
mpirun_pid=$!
deadline=$((SECONDS + 60))
until grep -q '^epoch 2/' "$tmp/down.out" 2>/dev/null; do
  if ((SECONDS > deadline)) || ! kill -0 $mpirun_pid 2>/dev/null; then
    cat "$tmp/down.err" "$tmp"/down-rank-*.err
    echo "FAIL: the run for the link test did not start training"
    exit 1
  fi
  sleep 0.2
done
ip -n "$ns_b" link set $iface down
down_at=$SECONDS
log "link of $name_b down"
ranks_left() {
  { ip netns pids "$ns_a"; ip netns pids "$ns_b"; } | xargs -r ps -o comm= -p | grep -c '^lockstep-train' || true
}
bound=$((collective_timeout + 20))
while (($(ranks_left) > 0 && SECONDS - down_at < bound)); do sleep 0.5; done
took=$((SECONDS - down_at))
left=$(ranks_left)
for f in "$tmp"/down-rank-*.err; do echo "---- $(basename "$f")"; grep -v '^launcher:' "$f" || true; done
echo "----"
check "every rank exited within ${bound} s of the link going down (${took} s, ${left} left)" \
  test "$left" -eq 0
# Each host: a rank reports the collective timeout, and its error ends the job (MPI_Abort): the
# launcher may then stop a neighbour on the same host before that one's own deadline passes (a
# few milliseconds later), so not every rank need print it; none may fail any other way.
reports() { grep -Eq "\[rank $1/4 [^]]*\] .* did not complete within ${collective_timeout} s" \
              "$tmp/down-rank-$1.err"; }
for pair in "0 1 $name_a" "2 3 $name_b"; do
  read -r r0 r1 host <<<"$pair"
  check "a rank on $host reports the collective timeout" eval "reports $r0 || reports $r1"
done
for r in 0 1 2 3; do
  check "rank $r has no other error" \
    eval "! grep -v -e 'did not complete within' -e '^launcher:' '$tmp/down-rank-$r.err' | grep -Eqi 'error|terminate|segmentation|abort'"
done
# mpirun itself may wait much longer: its kill order to host B's daemon sits in a TCP send queue,
# which keepalive does not probe, and Open MPI has no abort timeout. Give it a moment, then end it.
for _ in $(seq 10); do kill -0 $mpirun_pid 2>/dev/null || break; sleep 1; done
if kill -0 $mpirun_pid 2>/dev/null; then
  log "mpirun still waits for the unreachable host's daemon after $((SECONDS - down_at)) s; ending it"
  for ns in "$ns_a" "$ns_b"; do
    pids=$(ip netns pids "$ns")
    # shellcheck disable=SC2086
    [[ -z $pids ]] || kill -9 $pids 2>/dev/null || true
  done
else
  set +e; wait $mpirun_pid; rc=$?; set -e
  check "mpirun reports the failure (exit $rc)" test $rc -ne 0
fi

if [[ $fails -ne 0 ]]; then
  echo "FAIL: $fails check(s) failed"
  exit 1
fi
echo "PASS"
