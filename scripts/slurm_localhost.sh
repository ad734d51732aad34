#!/bin/bash
# Runs an experiment grid as a Slurm job array on this one machine, and checks that the
# merged shards equal the one-process run, record for record.
#
# It installs Debian's slurm-wlm and munge (as root), starts munged, slurmctld and slurmd
# for a one-node cluster named after this host, submits examples/slurm/experiment.sbatch
# as an array of 3 tasks over a small lengthgen grid, waits for it, merges the shards and
# compares them with the same grid run by one process. It leaves the daemons running;
# `scripts/slurm_localhost.sh stop` stops them.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = stop ]; then
    pkill -x slurmd || true; pkill -x slurmctld || true; pkill -x munged || true
    exit 0
fi
[ "$(id -u)" = 0 ] || { echo "run as root: it installs and starts Slurm" >&2; exit 1; }

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /etc/munge
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=posenc
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmUser=root
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown -R munge:munge /etc/munge /run/munge 2>/dev/null || true
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || su -s /bin/sh munge -c munged 2>/dev/null || munged --force
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 30); do
    sinfo -h -o %T 2>/dev/null | grep -qE 'idle|mixed' && break
    sleep 1
done
sinfo

cargo build --release --quiet
posenc=$PWD/target/release/posenc
work=$(mktemp -d)
grid=(lengthgen experiment --task copy --budget quick --steps 200 --encodings none,rope,alibi
      --seeds 2 --test-instances 16 --quiet)

echo "== the array: 3 tasks over 6 cells"
POSENC=$posenc sbatch --wait --array=1-3 --chdir="$work" \
    examples/slurm/experiment.sbatch "${grid[@]}" --out "$work/sharded"
ls "$work/sharded"
"$posenc" "${grid[@]}" --out "$work/sharded" --merge >/dev/null
echo "== one process"
"$posenc" "${grid[@]}" --out "$work/whole" >/dev/null
python3 - "$work/sharded/results.json" "$work/whole/results.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["config"] == b["config"], "the configs differ"
assert a["records"] == b["records"], "the records differ"
print(f"merged shards = one process: {len(a['records'])} records, {len(a['runs'])} runs")
PY
