#!/usr/bin/env bash
# local-cluster.sh — a real Slurm cluster on this one machine, for tests, demos and by hand:
# munge, slurmctld and slurmd (one node, or one node per network namespace) with fake GPU
# character devices, gres.conf and the NodeName line written by loom-topo from a topology file,
# and a plugstack.conf that loads the built spank_loom.so when it exists.
#
#   contrib/local-cluster.sh start [--gpus a100:2,v100:2 | --nodes "a100:2 v100:2"] [--topology FILE[,FILE...]]
#   contrib/local-cluster.sh stop | status | env | names
#
# Environment: LOOM_CLUSTER_DIR (state folder, default /tmp/loom-cluster), LOOM_BUILDDIR (where
# loom-topo and the plugin were built, default the source tree), LOOM_SLURM_PORT (slurmctld
# port, default the first free pair from 16817; slurmd uses the next one), LOOM_CLUSTER_SUBNET
# (the nodes' /24, default 10.77.N with N from the folder's name). After `start`,
# `eval "$(local-cluster.sh env)"` sets SLURM_CONF for srun, sbatch, salloc, sinfo and scontrol.
#
# Clusters in different folders run side by side: the bridge, the namespaces and the veths are
# named from the folder (lbHHHH, lHHHHnI, lHHHHvI: four hex digits of its name), and each stops
# only what it started (its daemons by the PIDs in its folder, its own network, and munged only
# when no other cluster of this machine still uses the munged it started).
set -euo pipefail

prog=local-cluster
srcdir=$(cd "$(dirname "$0")/.." && pwd)
dir=${LOOM_CLUSTER_DIR:-/tmp/loom-cluster}
builddir=${LOOM_BUILDDIR:-$srcdir}
fixtures=$srcdir/tests/fixtures/topology
id=$(printf '%s' "$dir" | md5sum | cut -c1-4)  # this cluster's network names, from its folder
bridge=lb$id
nsp=l$id  # namespaces ${nsp}nI, veths ${nsp}vI (bridge side) and ${nsp}pI (the node's eth0)
subnet=${LOOM_CLUSTER_SUBNET:-10.77.$((0x$id % 200 + 20))}
[ -z "${LOOM_CLUSTER_SUBNET:-}" ] && [ -s "$dir/subnet" ] && subnet=$(cat "$dir/subnet")  # the one start chose
munge_users=/run/munge/loom-clusters  # the folders of the clusters that use the munged one of them started

die() { echo "$prog: $*" >&2; exit 1; }
say() { echo "$prog: $*" >&2; }
usage() { sed -n '6,7p' "$0" | sed 's/^# *//' >&2; exit 2; }

loom_topo() {
  local t=${LOOM_TOPO:-$builddir/loom-topo}
  [ -x "$t" ] || t=$(command -v loom-topo || true)
  [ -n "$t" ] && [ -x "$t" ] || die "loom-topo not found (build Loom first, or set LOOM_BUILDDIR)"
  "$t" "$@"
}

plugin_path() {
  local p
  for p in "$builddir/spank_plugin/.libs/spank_loom.so" "$builddir/.libs/spank_loom.so"; do
    [ -f "$p" ] && { echo "$p"; return; }
  done
}

# --- munge -----------------------------------------------------------------------------------
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  if munge_ok; then  # another cluster's munged: this one counts itself among its users
    [ -f "$munge_users" ] && echo "$dir" >>"$munge_users"
    return 0
  fi
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey -c -f >/dev/null 2>&1 || mungekey -c
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  chmod 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged
  echo "$dir" >>"$munge_users"
  cat /run/munge/munged.pid >"$dir/started-munge" 2>/dev/null || touch "$dir/started-munge"
  for _ in $(seq 50); do munge_ok && return 0; sleep 0.1; done
  die "munged started but 'munge -n | unmunge' does not succeed"
}

# Leaves the munged this cluster started running while another cluster still uses it; else stops
# it, by its PID. A cluster that found munged running leaves it alone.
stop_munge() {
  if [ -f "$munge_users" ]; then
    grep -vxF "$dir" "$munge_users" >"$munge_users.new" || true
    mv "$munge_users.new" "$munge_users"
  fi
  [ -f "$dir/started-munge" ] || return 0
  local other pid
  while read -r other; do
    [ -n "$other" ] && pid_alive "$other/slurmctld.pid" && { say "munged left running: the cluster in $other uses it"; return 0; }
  done <"$munge_users" 2>/dev/null || true
  pid=$(cat "$dir/started-munge" 2>/dev/null || true)
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = munged ]; then kill "$pid" 2>/dev/null || true; fi
  rm -f "$dir/started-munge" "$munge_users"
}

# --- configuration ----------------------------------------------------------------------------
default_topology() {  # GPU spec -> fixture
  case "$1" in
    a100:2,v100:2) echo "$fixtures/local-mixed.xml" ;;
    a100:2) echo "$fixtures/local-a100.xml" ;;
    v100:2) echo "$fixtures/local-v100.xml" ;;
    *) die "no built-in topology for --gpus/--nodes entry '$1'; give --topology FILE" ;;
  esac
}

gres_of() {  # topology file -> "a100:2,v100:2" (the Gres= of its NodeName line, without gpu:)
  loom_topo --topology "$1" --host x node-conf --format json | sed -n 's/.*"gres":"\([^"]*\)".*/\1/p' | sed 's/gpu://g'
}

check_spec() {  # SPEC TOPOLOGY
  [[ "$1" =~ ^[a-z0-9]+:[0-9]+(,[a-z0-9]+:[0-9]+)*$ ]] || die "bad GPU spec '$1' (expected CLASS:N[,CLASS:N...])"
  local have
  have=$(gres_of "$2") || die "cannot read topology $2"
  [ "$have" = "$1" ] || die "topology $2 has GPUs $have, not $1"
}

real_memory() {  # MiB, as slurmd -C reports this machine (falling back to /proc/meminfo)
  local mb
  mb=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -1)
  [ -n "$mb" ] || mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
  echo "$mb"
}

write_node() {  # NAME TOPOLOGY ADDR -> NodeName line; gres.conf lines; fake devices
  local name=$1 topo=$2 addr=$3 devdir=$dir/dev/$1 line n
  mkdir -p "$devdir" "$dir/spool-$name"
  line=$(loom_topo --topology "$topo" node-conf --host "$name")
  # The fixture's RealMemory is the modelled machine's; declare this one's, as slurmd -C
  # measures it, so that --mem requests are scheduled against real memory.
  line=$(echo "$line" | sed 's/ RealMemory=[0-9]*//')
  line="$line RealMemory=$(real_memory)"
  [ -n "$addr" ] && line="$line NodeAddr=$addr"
  echo "$line" >>"$dir/nodes.conf"
  loom_topo --topology "$topo" gres --host "$name" --dev-dir "$devdir" | grep -v '^#' |
    sed "s/^/NodeName=$name /" >>"$dir/gres.conf" || true
  n=0
  while [ -e "$devdir/nvidia$n" ] || grep -q "File=$devdir/nvidia$n " "$dir/gres.conf"; do
    [ -c "$devdir/nvidia$n" ] || mknod "$devdir/nvidia$n" c 195 "$n"
    n=$((n + 1))
  done
  cp "$topo" "$dir/topology-$name.xml"
}

write_conf() {  # HOSTSPEC
  local host=$1 plugin
  {
    echo "# Loom local cluster, written by contrib/local-cluster.sh"
    echo "ClusterName=loom"
    echo "SlurmctldHost=$host"
    echo "SlurmctldPort=$port"
    echo "SlurmdPort=$((port + 1))"
    echo "AuthType=auth/munge"
    # A requeued job waits out its old credential (120 s by default); a test cluster need not.
    echo "AuthInfo=cred_expire=20"
    echo "CredType=cred/munge"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/affinity"
    echo "SelectType=select/cons_tres"
    # Memory is consumable, as on a production cluster: --mem beyond a node's RealMemory is
    # refused and jobs share a node's memory. A job without --mem gets 512 MiB per CPU, not
    # the whole node (Slurm's default), so small jobs still share the node.
    echo "SelectTypeParameters=CR_Core_Memory"
    echo "DefMemPerCPU=512"
    echo "GresTypes=gpu"
    echo "MpiDefault=pmix"
    echo "SlurmdParameters=config_overrides"
    echo "ReturnToService=2"
    echo "SchedulerType=sched/backfill"
    # Start a batch job (a sweep's next array task) when one ends, not up to 3 s later; backfill
    # (which also preempts spot jobs for higher-tier ones) every 2 s, not 30.
    echo "SchedulerParameters=batch_sched_delay=0,bf_interval=2,sched_interval=5"
    echo "AccountingStorageType=accounting_storage/none"
    # Finished jobs (array tasks included) go to a text file that `sacct -c` reads: the test
    # cluster runs no slurmdbd.
    echo "JobCompType=jobcomp/filetxt"
    echo "JobCompLoc=$dir/jobcomp.txt"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool-%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/slurmctld.log"
    echo "SlurmdLogFile=$dir/slurmd-%n.log"
    echo "SlurmctldDebug=info"
    echo "SlurmdDebug=info"
    echo "PlugStackConfig=$dir/plugstack.conf"
    echo "MailProg=/bin/true"
    echo "KillWait=5"
    echo "MinJobAge=60"
    cat "$dir/nodes.conf"
    # A spot partition, as clusters sell idle GPUs: its jobs are preempted (SIGTERM, then
    # GraceTime seconds to finish, then SIGKILL) by any job of the higher tier that needs their
    # resources.
    echo "PreemptType=preempt/partition_prio"
    echo "PreemptMode=CANCEL"
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=2"
    echo "PartitionName=spot Nodes=ALL MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=1 PreemptMode=CANCEL GraceTime=10"
  } >"$dir/slurm.conf"
  # PMIx's ds21 data store (its default) made about 1 start-up in 70 with two tasks per node die
  # in MPI_Init (SIGSEGV, a call through a NULL pointer; 3 of 200 here); with the hash store, 0 of
  # 400. The tasks get it from PMIxEnv, slurmstepd's PMIx server from slurmd's environment.
  {
    echo "PMIxCliTmpDirBase=$dir/pmix"
    echo "PMIxEnv=PMIX_MCA_gds=hash"
  } >"$dir/mpi.conf"
  plugin=$(plugin_path || true)
  {
    echo "# Loom local cluster SPANK plugins"
    if [ -n "$plugin" ]; then
      echo "optional $plugin topology=$dir/topology.xml"
    else
      echo "# spank_loom.so is not built yet: no Loom plugin loaded"
    fi
  } >"$dir/plugstack.conf"
}

# --- daemons ----------------------------------------------------------------------------------
pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
port_used() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

wait_nodes_idle() {
  local i state
  for i in $(seq 150); do
    pid_alive "$dir/slurmctld.pid" || { sleep 0.2; pid_alive "$dir/slurmctld.pid" || break; }
    state=$(SLURM_CONF=$dir/slurm.conf sinfo -h -o '%T' 2>/dev/null | sort -u | tr '\n' ' ')
    case "$state" in
      "idle "|"idle") return 0 ;;
    esac
    sleep 0.2
  done
  say "nodes did not become idle (state: ${state:-unknown}); slurmd log:"
  tail -n 20 "$dir"/slurmd-*.log >&2 || true
  tail -n 20 "$dir/slurmctld.log" >&2 || true
  return 1
}

subnet_used() { ip -o -4 addr show 2>/dev/null | grep -q " ${1//./\\.}\.[0-9]*/"; }

choose_subnet() {  # the folder's subnet, or the next free one (LOOM_CLUSTER_SUBNET: that one or nothing)
  if [ -z "${LOOM_CLUSTER_SUBNET:-}" ]; then
    local n=${subnet##*.} tries=0
    while subnet_used "$subnet" && [ $tries -lt 200 ]; do n=$(( (n - 20 + 1) % 200 + 20 )); subnet=10.77.$n; tries=$((tries + 1)); done
  fi
  if subnet_used "$subnet"; then die "the subnet $subnet.0/24 is in use on this machine (another cluster?): set LOOM_CLUSTER_SUBNET"; fi
  echo "$subnet" >"$dir/subnet"
}

net_setup() {  # N nodes in namespaces ${nsp}nI with eth0 = subnet.1I on this cluster's bridge
  ip link add "$bridge" type bridge
  ip addr add "$subnet.1/24" dev "$bridge"
  ip link set "$bridge" up
  local i
  for i in $(seq "$1"); do
    ip netns add "${nsp}n$i"
    ip link add "${nsp}v$i" type veth peer name "${nsp}p$i"
    ip link set "${nsp}v$i" master "$bridge"
    ip link set "${nsp}v$i" up
    ip link set "${nsp}p$i" netns "${nsp}n$i"
    nsenter --net="/run/netns/${nsp}n$i" ip link set "${nsp}p$i" name eth0
    nsenter --net="/run/netns/${nsp}n$i" ip addr add "$subnet.1$i/24" dev eth0
    nsenter --net="/run/netns/${nsp}n$i" ip link set eth0 up
    nsenter --net="/run/netns/${nsp}n$i" ip link set lo up
  done
}

net_teardown() {  # this cluster's network only
  local ns link
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${nsp}n[0-9]+\$" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
  # Deleting a namespace normally destroys its veth pair; some kernels (gVisor) keep our end.
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^${nsp}v[0-9]+\$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
}

cmd_start() {
  local gpus="" nodes="" topology=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --gpus) gpus=${2:?--gpus needs a value}; shift 2 ;;
      --gpus=*) gpus=${1#*=}; shift ;;
      --nodes) nodes=${2:?--nodes needs a value}; shift 2 ;;
      --nodes=*) nodes=${1#*=}; shift ;;
      --topology) topology=${2:?--topology needs a value}; shift 2 ;;
      --topology=*) topology=${1#*=}; shift ;;
      *) say "unknown argument '$1'"; usage ;;
    esac
  done
  [ "$(id -u)" -eq 0 ] || die "must run as root (slurmd, mknod and network namespaces need it)"
  [ -n "$gpus" ] && [ -n "$nodes" ] && die "--gpus and --nodes exclude each other"
  if pid_alive "$dir/slurmctld.pid"; then die "a cluster is already running in $dir (stop it first)"; fi
  local host specs=() files=() i f
  host=$(hostname -s)
  # Validate everything before touching the machine.
  if [ -z "$nodes" ]; then
    [ -n "$topology" ] || topology=$(default_topology "${gpus:-a100:2,v100:2}")
    [ -f "$topology" ] || die "topology file $topology does not exist"
    [ -n "$gpus" ] && check_spec "$gpus" "$topology"
  else
    read -r -a specs <<<"$nodes"
    IFS=, read -r -a files <<<"$topology"
    [ -z "$topology" ] || [ "${#files[@]}" -eq "${#specs[@]}" ] ||
      die "--topology names ${#files[@]} files for ${#specs[@]} nodes"
    [ "${#specs[@]}" -le 9 ] || die "at most 9 nodes"
    for i in "${!specs[@]}"; do
      f=${files[$i]:-}
      [ -n "$f" ] || f=$(default_topology "${specs[$i]}")
      [ -f "$f" ] || die "topology file $f does not exist"
      check_spec "${specs[$i]}" "$f"
      files[$i]=$f
    done
  fi
  port=${LOOM_SLURM_PORT:-}
  if [ -z "$port" ]; then  # the first free pair from 16817: a cluster beside another takes the next
    port=16817
    while port_used "$port" || port_used "$((port + 1))"; do port=$((port + 2)); done
  fi
  local p
  for p in "$port" "$((port + 1))"; do
    port_used "$p" && die "port $p is already in use (another cluster? stop it, or set LOOM_SLURM_PORT)"
  done
  rm -rf "$dir"
  mkdir -p "$dir/state" "$dir/pmix" "$dir/dev"
  : >"$dir/nodes.conf"
  : >"$dir/gres.conf"
  start_munge

  if [ -z "$nodes" ]; then
    write_node "$host" "$topology" ""
    cp "$topology" "$dir/topology.xml"
    write_conf "$host"
    slurmctld -f "$dir/slurm.conf" || die "slurmctld did not start; see $dir/slurmctld.log"
    PMIX_MCA_gds=hash slurmd -f "$dir/slurm.conf" || die "slurmd did not start; see $dir/slurmd-$host.log"
  else
    choose_subnet
    for i in "${!specs[@]}"; do write_node "n$((i + 1))" "${files[$i]}" "$subnet.1$((i + 1))"; done
    # One plugin topology per node: each slurmd sees its own file through a private bind mount.
    write_conf "$host($subnet.1)"
    sed -i "s|topology=$dir/topology.xml|topology=$dir/topology-node.xml|" "$dir/plugstack.conf"
    net_teardown
    echo "${#specs[@]}" >"$dir/netns"  # before set-up, so that stop cleans a half-made network
    net_setup "${#specs[@]}"
    touch "$dir/topology-node.xml"
    slurmctld -f "$dir/slurm.conf" || die "slurmctld did not start; see $dir/slurmctld.log"
    for i in "${!specs[@]}"; do
      local n=$((i + 1))
      nsenter --net="/run/netns/${nsp}n$n" unshare -m -u --propagation private sh -c "
        hostname n$n
        mount -t tmpfs tmpfs '$dir/pmix'
        mount -t tmpfs tmpfs /dev/shm
        mount --bind '$dir/topology-n$n.xml' '$dir/topology-node.xml'
        exec env PMIX_MCA_gds=hash slurmd -N n$n -f '$dir/slurm.conf'" || die "slurmd n$n did not start; see $dir/slurmd-n$n.log"
    done
  fi
  wait_nodes_idle || die "the cluster did not come up"
  say "up in $dir; run: export SLURM_CONF=$dir/slurm.conf"
  SLURM_CONF=$dir/slurm.conf sinfo -N -p debug -o '%N %T %c %G' >&2
}

# slurmstepd processes of this cluster (they log into $dir), which outlive a killed slurmd.
stepd_pids() {
  local pid
  for pid in $(pgrep -x slurmstepd 2>/dev/null || true); do
    ls -l "/proc/$pid/fd" 2>/dev/null | grep -q -- "-> $dir/" && echo "$pid"
  done
}

kill_tree() {  # SIGNAL PID: the process and all its descendants
  local child
  for child in $(pgrep -P "$2" 2>/dev/null || true); do kill_tree "$1" "$child"; done
  kill "-$1" "$2" 2>/dev/null || true
}

cmd_stop() {
  local f pid
  # Jobs first, so that their steps end cleanly while slurmd still runs.
  if pid_alive "$dir/slurmctld.pid"; then
    SLURM_CONF=$dir/slurm.conf scancel --full --quiet $(SLURM_CONF=$dir/slurm.conf squeue -h -o %A 2>/dev/null) 2>/dev/null || true
    for _ in $(seq 50); do
      [ -z "$(SLURM_CONF=$dir/slurm.conf squeue -h 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  for f in "$dir"/slurmd-*.pid "$dir/slurmctld.pid"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$f"
  done
  for pid in $(stepd_pids); do kill_tree 9 "$pid"; done
  if [ -f "$dir/netns" ]; then
    net_teardown
    rm -f "$dir/netns"
  fi
  stop_munge
  say "stopped ($dir kept for its logs)"
}

cmd_status() {
  if pid_alive "$dir/slurmctld.pid"; then
    echo "slurmctld: running (pid $(cat "$dir/slurmctld.pid"))"
    SLURM_CONF=$dir/slurm.conf sinfo -N -p debug -o '%N %T %c %G'
  else
    echo "slurmctld: not running ($dir)"
    return 3
  fi
}

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) echo "export SLURM_CONF=$dir/slurm.conf" ;;
  names) echo "bridge=$bridge nsp=$nsp subnet=$subnet" ;;  # node I: namespace ${nsp}nI, its veth ${nsp}vI
  -h|--help|help) usage ;;
  *) usage ;;
esac
