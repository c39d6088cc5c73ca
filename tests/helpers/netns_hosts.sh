# Two hosts on one machine, for end-to-end tests: network namespaces joined by a veth pair. Host i
# (0 or 1) has the address HOST_IP[i], an interface named HOST_IFACE in both namespaces (so one
# --iface setting serves both hosts), and the host name HOST_NAME[i], which every command started
# on it sees (each gets its own UTS namespace). Sourced by tests; needs root.
#
#   netns_hosts_create TAG   makes the hosts; returns 1 with the reason in NETNS_ERROR when
#                            network namespaces cannot be created here
#   host_prefix I            sets HOST_PREFIX to the command words that run a command on host I:
#                            "${HOST_PREFIX[@]}" CMD... & leaves $! = CMD's own pid (every step
#                            execs). The namespace is entered with nsenter --net, so /sys and the
#                            cgroup mounts stay the machine's (slurmd needs them).
#   on_host I CMD...         runs CMD on host I
#   netns_hosts_destroy      kills what still runs in the namespaces and deletes them, and the
#                            hosts' Open MPI session folders
# shellcheck shell=bash disable=SC2034  # the globals are for the sourcing test

HOST_NS=()
HOST_NAME=()
HOST_IP=(10.77.0.1 10.77.0.2)
HOST_IFACE=lsv0
NETNS_ERROR=""
netns_veth_=""

netns_hosts_create() {
  local tag=$1 err i
  if ! err=$(ip netns add "lockstep-a-$tag" 2>&1); then
    NETNS_ERROR="ip netns add failed: $err"
    return 1
  fi
  HOST_NS=("lockstep-a-$tag")
  ip netns add "lockstep-b-$tag" || { NETNS_ERROR="ip netns add failed"; return 1; }
  HOST_NS+=("lockstep-b-$tag")
  HOST_NAME=("ls-a-$tag" "ls-b-$tag")
  netns_veth_="lsA$tag"
  ip link add "lsA$tag" type veth peer name "lsB$tag" || { NETNS_ERROR="no veth pair"; return 1; }
  ip link set "lsA$tag" netns "${HOST_NS[0]}"
  ip link set "lsB$tag" netns "${HOST_NS[1]}"
  ip -n "${HOST_NS[0]}" link set "lsA$tag" name "$HOST_IFACE"
  ip -n "${HOST_NS[1]}" link set "lsB$tag" name "$HOST_IFACE"
  for i in 0 1; do
    ip -n "${HOST_NS[i]}" addr add "${HOST_IP[i]}/24" dev "$HOST_IFACE"
    ip -n "${HOST_NS[i]}" link set lo up
    ip -n "${HOST_NS[i]}" link set "$HOST_IFACE" up
  done
}

host_prefix() {
  # shellcheck disable=SC2016  # expanded by the inner shell
  HOST_PREFIX=(nsenter "--net=/var/run/netns/${HOST_NS[$1]}" unshare --uts
    sh -c 'hostname "$0" && exec "$@"' "${HOST_NAME[$1]}")
}

on_host() {
  local i=$1
  shift
  host_prefix "$i"
  "${HOST_PREFIX[@]}" "$@"
}

netns_hosts_destroy() {
  local ns pids
  for ns in "${HOST_NS[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086
    [[ -z $pids ]] || kill -9 $pids 2>/dev/null
  done
  for ns in "${HOST_NS[@]}"; do ip netns del "$ns" 2>/dev/null; done
  [[ -z $netns_veth_ ]] || ip link del "$netns_veth_" 2>/dev/null
  # Open MPI's session folders are named by host (/tmp/ompi.HOST.UID); those of the hosts' killed
  # daemons would otherwise stay in /tmp, one pair per run of the test
  local name
  for name in "${HOST_NAME[@]}"; do rm -rf "${TMPDIR:-/tmp}/ompi.$name".*; done
  HOST_NS=()
  HOST_NAME=()
  return 0
}
