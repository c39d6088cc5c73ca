# A throwaway Slurm cluster for end-to-end tests: munged, slurmctld and one slurmd per node, started
# by hand (no systemd) with configuration, state, spool and logs in one folder, and two fake GPUs
# per node (GRES over character devices: enough for Slurm to hand each task its own
# CUDA_VISIBLE_DEVICES). Daemons are stopped by their pids. Sourced by tests; needs root.
#
#   slurm_tools SRC              makes sure munged, slurmctld, slurmd and the clients are there
#                                (installs them with SRC/scripts/setup.sh --test when missing);
#                                returns 1 with the reason in SLURM_ERROR
#   slurm_node NAME ADDR [HOST]  declares a node; HOST: a netns_hosts.sh host index to run its
#                                slurmd on (default: this machine's network)
#   slurm_start DIR              writes DIR/slurm.conf (the controller runs beside the first
#                                node's slurmd), starts the daemons and waits until every node is
#                                idle; returns 1 with the reason in SLURM_ERROR
#   sl CMD...                    a Slurm client command (sbatch, scontrol, squeue...) against it,
#                                run where the controller runs
#   slurm_wait_job ID LIMIT_S    waits for job ID to end; prints its final state
#   slurm_job_field ID FIELD     one field of `scontrol show job ID`
#   slurm_show_logs              the last lines of every daemon log
#   slurm_stop                   cancels what is left, stops the daemons; safe to repeat
# Set before slurm_start: SLURM_TASK_PLUGIN (default task/none: tasks are not bound to CPUs) and
# SLURM_TASK_PLUGIN_PARAM (TaskPluginParam, e.g. cores with task/affinity).
# shellcheck shell=bash disable=SC2034  # the globals are for the sourcing test

slurm_nodes_=()      # "name addr host" per node
slurm_pids_=()
slurm_dir_=""
slurm_client_host_=""
SLURM_ERROR=""
SLURM_FAKE_GPUS=0    # GPUs per node that Slurm knows of (0 where mknod is refused)
SLURM_TASK_PLUGIN=task/none
SLURM_TASK_PLUGIN_PARAM=""

slurm_tools() {
  local tools=(munged slurmctld slurmd sbatch scontrol squeue scancel sinfo) tool
  for tool in "${tools[@]}"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "slurm_cluster: $tool missing: installing Slurm and munge (scripts/setup.sh --test)"
      bash "$1/scripts/setup.sh" --test || { SLURM_ERROR="cannot install Slurm and munge"; return 1; }
      break
    fi
  done
  for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || { SLURM_ERROR="$tool is not installed"; return 1; }
  done
}

slurm_node() { slurm_nodes_+=("$1 $2 ${3:-}"); }

# Sets NODE_PREFIX to the words that run a command on netns host $1 (nothing: here).
slurm_prefix_() {
  NODE_PREFIX=()
  if [[ -n $1 ]]; then
    host_prefix "$1"
    NODE_PREFIX=("${HOST_PREFIX[@]}")
  fi
}

sl() {
  slurm_prefix_ "$slurm_client_host_"
  "${NODE_PREFIX[@]}" "$@"
}

# A TCP port no socket here holds, in any state: random between 20000 and the kernel's ephemeral
# range (ip_local_port_range, from 32768 by default), so that no outgoing connection (an srun's,
# MPI's) can take it before the daemon binds it, and not one still in TIME_WAIT from an earlier
# cluster (a port that only nobody listened on once failed slurmctld's bind: "Address already in
# use").
slurm_free_port_() {
  local p low=32768
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
  ((low > 21000)) || low=32768
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % (low - 20000)))
    if ! ss -Htan "sport = :$p" 2>/dev/null | grep -q .; then echo "$p"; return; fi
  done
  echo 0
}

slurm_show_logs() {
  local f
  for f in "$slurm_dir_"/log/*.log; do
    [[ -f $f ]] || continue
    echo "---- $f (last lines)"
    tail -n 15 "$f"
  done
}

slurm_start() {
  local dir=$1 name addr host first_name first_addr first_host ctld_port d_port gres_types=""
  slurm_dir_=$dir
  mkdir -p "$dir"/{state,log,dev}
  read -r first_name first_addr first_host <<<"${slurm_nodes_[0]}"
  slurm_client_host_=$first_host

  dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge.key"
  ctld_port=$(slurm_free_port_)
  d_port=$(slurm_free_port_)
  [[ $ctld_port -ne 0 && $d_port -ne 0 && $ctld_port -ne $d_port ]] || { SLURM_ERROR="no free TCP port"; return 1; }

  SLURM_FAKE_GPUS=2
  : >"$dir/gres.conf"
  local node_lines=() names=()
  for spec in "${slurm_nodes_[@]}"; do
    read -r name addr host <<<"$spec"
    names+=("$name")
    mkdir -p "$dir/spool/$name" "$dir/tmp/$name" "$dir/dev/$name"
    if [[ $SLURM_FAKE_GPUS -gt 0 ]] && mknod "$dir/dev/$name/nvidia0" c 1 3 2>/dev/null &&
       mknod "$dir/dev/$name/nvidia1" c 1 3 2>/dev/null; then
      echo "NodeName=$name Name=gpu File=$dir/dev/$name/nvidia[0-1]" >>"$dir/gres.conf"
    else
      SLURM_FAKE_GPUS=0
    fi
    node_lines+=("NodeName=$name NodeAddr=$addr CPUs=$(nproc) RealMemory=1000 State=UNKNOWN")
  done
  if [[ $SLURM_FAKE_GPUS -gt 0 ]]; then
    gres_types="GresTypes=gpu"
    for i in "${!node_lines[@]}"; do node_lines[i]+=" Gres=gpu:$SLURM_FAKE_GPUS"; done
  else
    : >"$dir/gres.conf"
  fi
  touch "$dir/plugstack.conf"
  # TmpFS per node: Slurm's PMIx plugin makes its folders there, and nodes sharing a /tmp collide.
  # cred_expire also sets how long a requeued job waits before it starts again (default 120 s).
  cat >"$dir/slurm.conf" <<EOF
ClusterName=lockstep-test
SlurmctldHost=$first_name($first_addr)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock,cred_expire=10
CredType=cred/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=$SLURM_TASK_PLUGIN
${SLURM_TASK_PLUGIN_PARAM:+TaskPluginParam=$SLURM_TASK_PLUGIN_PARAM}
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobRequeue=1
$gres_types
TmpFS=$dir/tmp/%n
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
PlugStackConfig=$dir/plugstack.conf
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
ReturnToService=2
MinJobAge=600
$(printf '%s\n' "${node_lines[@]}")
PartitionName=debug Nodes=$(IFS=,; echo "${names[*]}") Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$dir/slurm.conf

  munged -F --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
    --seed-file="$dir/munge.seed" --log-file="$dir/log/munged.log" >>"$dir/log/munged.log" 2>&1 &
  slurm_pids_+=($!)
  for _ in $(seq 50); do [[ -S $dir/munge.sock ]] && break; sleep 0.1; done
  [[ -S $dir/munge.sock ]] || { SLURM_ERROR="munged did not start"; return 1; }

  slurm_prefix_ "$first_host"
  "${NODE_PREFIX[@]}" slurmctld -D -f "$SLURM_CONF" >>"$dir/log/slurmctld.log" 2>&1 &
  slurm_pids_+=($!)
  for spec in "${slurm_nodes_[@]}"; do
    read -r name addr host <<<"$spec"
    slurm_prefix_ "$host"
    "${NODE_PREFIX[@]}" slurmd -D -f "$SLURM_CONF" -N "$name" >>"$dir/log/slurmd-$name.log" 2>&1 &
    slurm_pids_+=($!)
  done

  local idle pid
  for _ in $(seq 60); do
    for pid in "${slurm_pids_[@]}"; do
      kill -0 "$pid" 2>/dev/null || { SLURM_ERROR="a Slurm daemon exited at start"; return 1; }
    done
    idle=$(sl sinfo -h -t idle -o %D 2>/dev/null || true)
    [[ ${idle:-0} -eq ${#slurm_nodes_[@]} ]] && return 0
    sleep 0.5
  done
  SLURM_ERROR="the nodes did not become idle within 30 s ($(sl sinfo -h -o '%N %T' 2>&1 | tr '\n' ' '))"
  return 1
}

slurm_job_field() {
  sl scontrol show job "$1" 2>/dev/null | grep -oE "(^| )$2=[^ ]*" | head -1 | cut -d= -f2
}

slurm_wait_job() {
  local id=$1 deadline=$((SECONDS + $2)) st=""
  while ((SECONDS < deadline)); do
    st=$(slurm_job_field "$id" JobState)
    case "$st" in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
        echo "$st"
        return ;;
    esac
    sleep 1
  done
  echo "STILL_${st:-UNKNOWN}_AFTER_${2}s"
}

slurm_stop() {
  local jobs pid i
  if [[ ${#slurm_pids_[@]} -gt 0 && -n ${SLURM_CONF:-} ]]; then
    # Cancel what is left first, so no job step outlives its daemons.
    jobs=$(sl squeue -h -o %i 2>/dev/null)
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086
      sl scancel $jobs 2>/dev/null
      for _ in $(seq 20); do [[ -z $(sl squeue -h -o %i 2>/dev/null) ]] && break; sleep 1; done
    fi
  fi
  for ((i = ${#slurm_pids_[@]} - 1; i >= 0; i--)); do kill "${slurm_pids_[i]}" 2>/dev/null; done
  for pid in "${slurm_pids_[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  slurm_pids_=()
  return 0
}
