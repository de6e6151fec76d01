#!/usr/bin/env bash
# A single-node Slurm on this machine, from Debian's packages: munge (authentication), MariaDB and
# slurmdbd (accounting, so that sacct answers), slurmctld and slurmd, all on localhost. CI runs
# `--executor slurm` against it (tests/test_slurm_cluster.py); on a workstation it is a way to try the
# cluster path without a cluster. Needs root (it installs packages and starts daemons).
#
#   scripts/slurm_cluster.sh start       install what is missing, configure, start; waits until a job runs
#   scripts/slurm_cluster.sh stop        stop every daemon it started (the configuration and state stay)
#   scripts/slurm_cluster.sh status      the node, the queue, and whether sacct answers
#   scripts/slurm_cluster.sh node-down   stop slurmd alone, as a node that fails (the tests' node failure)
#   scripts/slurm_cluster.sh node-up     start slurmd again; the node returns to service by itself
#
# `start` is idempotent: what is running is left running, what is not is started. Each action prints how
# long it took. The cluster is named attnlab-test, which is how the tests know it is one they may break.
#
# Why these settings (slurm.conf below):
# - no cgroups (a container may not give them): processes are tracked by their parent chain
#   (proctrack/linuxproc), so a job's processes are those it started, and ending a job ends them.
# - MaxArraySize=5 (ATTNLAB_SLURM_MAX_ARRAY_SIZE): small, so that a batch of a few files is split into
#   several arrays, as a real cluster's limit (often 1001) splits a large course.
# - SlurmdTimeout=5: a node whose slurmd stops answering is declared down within seconds (not after
#   300), and ReturnToService=2 puts it back when its slurmd registers again; AuthInfo cred_expire=10
#   lets a job requeued by that failure start again 11 s later (not 121), and the schedulers look at the
#   queue every 2 s (not 60 and 30), so that it does.
# - KillWait=5: at a time limit or a scancel, a job gets SIGTERM, then SIGKILL 5 s later (not 30).
# - no GPU (no GresTypes): a job asking for one is refused, as on a CPU partition.
set -euo pipefail

action=${1:-start}
started=$(date +%s%N)
cluster=attnlab-test
max_array_size=${ATTNLAB_SLURM_MAX_ARRAY_SIZE:-5}
logs=/var/log/slurm
reconfigure=0
state=/var/lib/slurm

elapsed() { echo "slurm_cluster.sh $action: $1 in $(( ($(date +%s%N) - started) / 1000000 )) ms"; }
fail() { echo "slurm_cluster.sh $action: $1" >&2; exit 1; }

# wait_for SECONDS WHAT COMMAND...: runs COMMAND every 0.2 s until it succeeds, or fails after SECONDS
wait_for() {
    local seconds=$1 what=$2; shift 2
    local until=$(( $(date +%s) + seconds ))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$until" ] || fail "$what did not come up within $seconds s (logs in $logs)"
        sleep 0.2
    done
}

# alive PIDFILE: the process the file names is running
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# end PIDFILE...: SIGTERM to the processes the files name, then wait for them to go (SIGKILL after 10 s)
end() {
    local pids=() file pid
    for file in "$@"; do alive "$file" && pids+=("$(cat "$file")"); done
    [ "${#pids[@]}" -gt 0 ] || return 0
    kill "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 50); do
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && break; pid=; done
        [ -n "$pid" ] || return 0
        sleep 0.2
    done
    kill -9 "${pids[@]}" 2>/dev/null || true
}

install_packages() {
    local missing=0 tool
    for tool in slurmctld slurmd slurmdbd munged mariadbd sacct; do
        command -v "$tool" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin command -v "$tool" >/dev/null 2>&1 || missing=1
    done
    [ "$missing" = 1 ] || return 0
    [ "$(id -u)" = 0 ] || fail "needs root to install slurm-wlm, munge, slurmdbd and mariadb-server"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge slurmdbd mariadb-server >/dev/null
}

write_configuration() {
    local host node
    host=$(hostname -s)
    # the controller and the node are found by this name: a machine that cannot resolve it is told
    getent hosts "$host" >/dev/null || echo "127.0.0.1 $host" >>/etc/hosts
    # the node as slurmd sees this machine (CPUs, sockets, memory), so that the controller accepts it
    node=$(slurmd -C | head -n 1)
    mkdir -p /etc/slurm "$logs" "$state/slurmctld" "$state/slurmd"
    local before; before=$(cat /etc/slurm/slurm.conf 2>/dev/null || true)
    cat >/etc/slurm/slurm.conf <<EOF
# Written by attnlab's scripts/slurm_cluster.sh: a single-node test cluster (see the script for why).
ClusterName=$cluster
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
StateSaveLocation=$state/slurmctld
SlurmdSpoolDir=$state/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$logs/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MaxArraySize=$max_array_size
SlurmdTimeout=5
SchedulerParameters=sched_interval=2,bf_interval=2
ReturnToService=2
KillWait=5
MinJobAge=300
InactiveLimit=0
MpiDefault=none
$node State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    # a cluster already running with other settings reads them again (in start_slurm)
    [ "$before" = "$(cat /etc/slurm/slurm.conf)" ] || reconfigure=1
    cat >/etc/slurm/slurmdbd.conf <<EOF
# Written by attnlab's scripts/slurm_cluster.sh. MariaDB's root on its socket: no password to keep.
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=/run/slurmdbd.pid
LogFile=$logs/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
EOF
    chmod 600 /etc/slurm/slurmdbd.conf
}

start_munge() {
    mkdir -p /run/munge && chown munge:munge /run/munge
    [ -s /etc/munge/munge.key ] || { mungekey --create && chown munge:munge /etc/munge/munge.key; }
    alive /run/munge/munged.pid || runuser -u munge -- munged
    wait_for 10 munged sh -c 'munge -n | unmunge'
}

start_mariadb() {
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
    if ! alive /run/mysqld/mysqld.pid; then
        # slurmdbd asks for a lock wait of 900 s and a buffer pool of at least 128 MiB
        setsid mariadbd --user=mysql --pid-file=/run/mysqld/mysqld.pid --innodb-lock-wait-timeout=900 \
            --innodb-buffer-pool-size=134217728 >>"$logs/mariadb.log" 2>&1 </dev/null &
    fi
    wait_for 30 MariaDB mariadb-admin ping
}

start_slurm() {
    alive /run/slurmdbd.pid || slurmdbd
    wait_for 30 slurmdbd sacctmgr -n show cluster
    sacctmgr -n -P show cluster format=cluster | grep -qx "$cluster" || sacctmgr -i add cluster "$cluster" >/dev/null
    if alive /run/slurmctld.pid; then
        [ "$reconfigure" = 0 ] || scontrol reconfigure
    else
        slurmctld
    fi
    wait_for 30 slurmctld scontrol ping
    alive /run/slurmd.pid || slurmd
    # a node left down (a node-down without its node-up) is put back
    scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    wait_for 30 "the node" sh -c "sinfo -h -o %t | grep -Eq '^(idle|mix|alloc)'"
    # the proof that it works: a job runs, and sacct has its record
    local job
    job=$(sbatch --parsable --wrap true --output /dev/null --time 1)
    wait_for 30 "a first job" sh -c "sacct -n -X -P -j $job -o State | grep -qx COMPLETED"
}

case "$action" in
start)
    install_packages
    export PATH=$PATH:/usr/sbin
    write_configuration
    start_munge
    start_mariadb
    start_slurm
    sinfo
    elapsed "a single-node Slurm ($cluster, MaxArraySize=$max_array_size) is up, sacct answers"
    ;;
stop)
    export PATH=$PATH:/usr/sbin
    # the controller first tells slurmdbd what it knows; MariaDB and munge go last
    end /run/slurmd.pid /run/slurmctld.pid
    end /run/slurmdbd.pid
    end /run/mysqld/mysqld.pid /run/munge/munged.pid
    elapsed "stopped"
    ;;
status)
    scontrol ping >/dev/null 2>&1 || fail "slurmctld does not answer: scripts/slurm_cluster.sh start brings it up"
    sinfo
    squeue
    sacct -n -X -S now-1hour >/dev/null && echo "sacct answers"
    scontrol show config | grep -E '^(ClusterName|MaxArraySize) '
    ;;
node-down)
    end /run/slurmd.pid
    elapsed "slurmd stopped"
    ;;
node-up)
    export PATH=$PATH:/usr/sbin
    alive /run/slurmd.pid || slurmd
    elapsed "slurmd started"
    ;;
*)
    fail "unknown action '$action' (start, stop, status, node-down or node-up)"
    ;;
esac
