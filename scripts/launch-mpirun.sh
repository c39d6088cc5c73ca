#!/usr/bin/env bash
# Starts a Lockstep program on one or several hosts with Open MPI's mpirun: one rank per GPU (or
# per CPU device), the hosts from a hostfile, and the network settings a cluster needs.
#
#   scripts/launch-mpirun.sh [options] [--] PROGRAM [ARGS...]
#   scripts/launch-mpirun.sh --hostfile hosts --ranks-per-node 4 --iface ib0 \
#       -- /opt/lockstep/bin/lockstep-train --data fmnist.h5 --model cnn --epochs 5
#
# Options:
#   --hostfile FILE      Open MPI hostfile, one host per line ("node1 slots=4"); default: this host
#   --hosts LIST         instead of a hostfile: comma-separated hosts ("node1,node2")
#   --ranks-per-node N   ranks on each host; default: the GPUs nvidia-smi lists here, else 1
#                        (with a warning when other hosts are named: a login node without GPUs
#                        is no guide to the compute nodes)
#   --np N               total ranks; default: hosts x ranks-per-node. Alone (no
#                        --ranks-per-node), ranks fill each host's slots in hostfile order
#   --iface LIST         network interface(s) (names like ib0,eth0 or a CIDR like 10.0.0.0/24) for
#                        MPI traffic (OMPI_MCA_btl_tcp_if_include), Open MPI's own control channel
#                        (OMPI_MCA_oob_tcp_if_include) and NCCL (NCCL_SOCKET_IFNAME; names only)
#   --tcp                MPI over TCP only (btl self,vader,tcp): for hosts without InfiniBand/UCX
#   --host-timeout SEC   give up on a host that stops answering after about SEC seconds (TCP
#                        keepalive on Open MPI's control channel; default 60). Without it, mpirun
#                        can wait for minutes on a host whose network went away, long after the
#                        ranks themselves stopped at the collective timeout (lockstep-train
#                        --timeout)
#   --bind-to WHAT       process binding (core, socket, none); default none, so BLAS threads and
#                        the data loader are not squeezed onto one core
#   --mpirun PATH        the mpirun to use (default: mpirun on PATH)
#   --dry-run            print the command instead of running it
#   --mca KEY VALUE      any other Open MPI parameter (repeatable)
#
# The program and its arguments must exist at the same path on every host. Every LOCKSTEP_*,
# NCCL_*, UCX_*, CUDA_* and OMP_NUM_THREADS variable set here is passed on to every rank, and so
# are PATH and LD_LIBRARY_PATH; CUDA_VISIBLE_DEVICES is not (it names this host's devices).
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "launch-mpirun: $*" >&2; exit 2; }

hostfile="" hosts="" per_node="" np="" iface="" tcp_only=0 bind="none" mpirun="mpirun" dry=0
host_timeout=60
mca=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --hostfile) hostfile=${2:?--hostfile needs a file}; shift 2 ;;
    --hosts) hosts=${2:?--hosts needs a list}; shift 2 ;;
    --ranks-per-node) per_node=${2:?--ranks-per-node needs a number}; shift 2 ;;
    --np) np=${2:?--np needs a number}; shift 2 ;;
    --iface) iface=${2:?--iface needs an interface}; shift 2 ;;
    --tcp) tcp_only=1; shift ;;
    --host-timeout) host_timeout=${2:?--host-timeout needs seconds}; shift 2 ;;
    --bind-to) bind=${2:?--bind-to needs a value}; shift 2 ;;
    --mpirun) mpirun=${2:?--mpirun needs a path}; shift 2 ;;
    --mca) [[ $# -ge 3 ]] || die "--mca needs KEY VALUE"; mca+=(--mca "$2" "$3"); shift 3 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || die "no program given (see --help)"
[[ -z "$hostfile" || -z "$hosts" ]] || die "give --hostfile or --hosts, not both"
[[ -z "$hostfile" || -r "$hostfile" ]] || die "cannot read hostfile $hostfile"
is_count() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }

# Hosts: unique first words of the hostfile's non-comment lines, or the --hosts list.
if [[ -n "$hostfile" ]]; then
  host_count=$(sed 's/#.*//' "$hostfile" | awk 'NF {print $1}' | sort -u | wc -l)
  [[ $host_count -ge 1 ]] || die "hostfile $hostfile names no host"
elif [[ -n "$hosts" ]]; then
  host_count=$(tr ',' '\n' <<<"$hosts" | awk 'NF' | sort -u | wc -l)
else
  host_count=1
fi

# --np alone fills each host's slots in order (Open MPI's default); otherwise place per_node ranks
# on every host.
use_ppr=1
[[ -n "$per_node" || -z "$np" ]] || use_ppr=0
per_node_guessed=0 gpus=0
if [[ -z "$per_node" ]]; then
  per_node=1 per_node_guessed=1
  if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    if [[ $gpus -ge 1 ]]; then per_node=$gpus; fi
  fi
fi
# This host's GPU count stands for every host's. Launched from a login node without GPUs that is
# one rank per node on GPU nodes, which runs, slowly, without a word: say so. (Only where the
# count places ranks: not for --np alone with a hostfile.)
if [[ $per_node_guessed -eq 1 && $gpus -eq 0 && ( -n "$hostfile" || -n "$hosts" ) &&
      ( $use_ppr -eq 1 || -n "$hosts" ) ]]; then
  echo "launch-mpirun: warning: no GPU on this host (${HOSTNAME:-?}), so 1 rank per node;" \
       "pass --ranks-per-node N for N GPUs per node" >&2
fi
is_count "$per_node" || die "--ranks-per-node must be a positive number, not '$per_node'"
[[ -n "$np" ]] || np=$((host_count * per_node))
is_count "$np" || die "--np must be a positive number, not '$np'"

cmd=("$mpirun" -np "$np" --bind-to "$bind")
[[ $use_ppr -eq 0 ]] || cmd+=(--map-by "ppr:${per_node}:node")
if [[ -n "$hostfile" ]]; then
  cmd+=(--hostfile "$hostfile")
elif [[ -n "$hosts" ]]; then
  # Each host offers exactly the slots the mapping uses.
  cmd+=(--host "$(tr ',' '\n' <<<"$hosts" | awk -v n="$per_node" 'NF {printf "%s%s:%d", s, $1, n; s=","}')")
fi
if [[ -n "$iface" ]]; then
  # Exported and also given as --mca: mpirun reads the environment, and its remote daemons get
  # the command-line parameters whatever their shells set.
  export OMPI_MCA_btl_tcp_if_include="$iface" OMPI_MCA_oob_tcp_if_include="$iface"
  cmd+=(--mca btl_tcp_if_include "$iface" --mca oob_tcp_if_include "$iface")
  if [[ "$iface" != */* ]]; then
    export NCCL_SOCKET_IFNAME="$iface"
  else
    echo "launch-mpirun: --iface $iface is an address range; NCCL_SOCKET_IFNAME needs interface" \
         "names, so NCCL picks its own interface (set NCCL_SOCKET_IFNAME yourself)" >&2
  fi
fi
[[ $tcp_only -eq 0 ]] || cmd+=(--mca btl "self,vader,tcp" --mca pml ob1)
if ! is_count "$host_timeout" || [[ $host_timeout -lt 6 ]]; then
  die "--host-timeout must be a number of seconds, 6 or more, not '$host_timeout'"
fi
# Idle time, then 3 unanswered probes: about host_timeout seconds in all.
cmd+=(--mca oob_tcp_keepalive_time $((host_timeout / 2))
      --mca oob_tcp_keepalive_intvl $((host_timeout / 6)) --mca oob_tcp_keepalive_probes 3)
cmd+=("${mca[@]}")
# mpirun passes none of these on by itself. PATH and LD_LIBRARY_PATH: a build whose NCCL, cuDNN or
# HDF5 is found through LD_LIBRARY_PATH (modules, conda) rather than its RUNPATH would otherwise
# stop on the second host at "libnccl.so.2: cannot open shared object file". CUDA_VISIBLE_DEVICES
# is left out: it names the devices of the host it was set on (often none, or another set, on a
# login node), and copied to every host it would hide or mis-pick GPUs there; each rank takes its
# local rank's GPU among what its own host shows.
for var in $(compgen -e); do
  case "$var" in
    CUDA_VISIBLE_DEVICES) ;;
    LOCKSTEP_*|NCCL_*|UCX_*|CUDA_*|OMP_NUM_THREADS|PATH|LD_LIBRARY_PATH) cmd+=(-x "$var") ;;
  esac
done
cmd+=("$@")

if [[ $dry -eq 1 ]]; then
  env_shown=$(compgen -e | grep -E '^(OMPI_MCA_(btl|oob)_tcp_if_include|NCCL_SOCKET_IFNAME)$' || true)
  for var in $env_shown; do printf '%s=%q ' "$var" "${!var}"; done
  printf '%q ' "${cmd[@]}"
  echo
  exit 0
fi
exec "${cmd[@]}"
