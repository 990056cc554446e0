#!/usr/bin/env bash
# A failover of a 3-node Patroni cluster under a fleet's batch (F12, F13).
# .ci/run runs it; it needs Debian's patroni and etcd-server (apt-get
# install patroni etcd-server), PostgreSQL 15 at $IDEM_PG_BIN (default
# /usr/lib/postgresql/15/bin); as root it runs PostgreSQL as the postgres
# user. It takes about a minute.
#
#   scripts/patroni-failover.sh           # synchronous_mode + synchronous_mode_strict
#   MODE=async scripts/patroni-failover.sh  # Patroni's default: pgjournal.Open refuses it (F12)
#
# It starts etcd and three Patroni nodes on free ports of 127.0.0.1, waits
# for a leader, runs
# idem-bench's fleet (3 processes, $OPS operations, one shared pgjournal,
# the DSN listing the three nodes with target_session_attrs=read-write)
# against the reference server, and SIGKILLs the leader's Patroni and
# postmaster $KILL_AFTER into the batch. Patroni promotes a replica; each
# process's RunBatch rides through the failover (F13). The report's
# "applied" column is what the reference server applied: $OPS when no
# operation was lost or applied twice, and the script fails otherwise.
# Everything lives in a temporary directory, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

MODE=${MODE:-strict}
OPS=${OPS:-2000}
KILL_AFTER=${KILL_AFTER:-4}
bin=${IDEM_PG_BIN:-/usr/lib/postgresql/15/bin}
for cmd in patroni etcd python3; do
  command -v "$cmd" >/dev/null || { echo "patroni-failover: $cmd not found (apt-get install patroni etcd-server)" >&2; exit 2; }
done
# PostgreSQL refuses to run as root: as root, Patroni runs as postgres.
as=() owner=$(id -un)
if [ "$(id -u)" = 0 ]; then
  as=(runuser -u postgres --) owner=postgres
fi

dir=$(mktemp -d /tmp/patroni-failover-XXXXXX)
chown "$owner" "$dir"
pids=() # etcd's, then each node's Patroni (or the runuser above it)
# postmaster prints the PID of node $1's postmaster, if it runs.
postmaster() { head -n 1 "$dir/node$1/postmaster.pid" 2>/dev/null || true; }
# patroni prints the PID of node $1's Patroni process.
patroni_pid() {
  local p=${pids[$1]}
  [ ${#as[@]} -eq 0 ] && { echo "$p"; return; }
  pgrep -P "$p" || true
}
cleanup() {
  for n in 1 2 3; do
    p=$(patroni_pid "$n"); [ -n "$p" ] && kill "$p" 2>/dev/null || true
  done
  sleep 2
  for n in 1 2 3; do
    p=$(postmaster "$n"); [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true
  done
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

# Nine free ports: etcd's client and peer ports, then each node's
# PostgreSQL and REST API.
read -r ec ep pg1 pg2 pg3 api1 api2 api3 _ < <(python3 -c 'import socket
socks = [socket.socket() for _ in range(9)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
pgport=(- "$pg1" "$pg2" "$pg3") apiport=(- "$api1" "$api2" "$api3")

# get prints the body of a GET at URL, and fails unless it answers 200
# within 2 s (python3 is Patroni's own, curl may be missing).
get() {
  python3 -c 'import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())
except Exception:
    sys.exit(1)' "$1"
}

etcd --name idem --data-dir "$dir/etcd" --enable-v2=true \
  --listen-client-urls "http://127.0.0.1:$ec" --advertise-client-urls "http://127.0.0.1:$ec" \
  --listen-peer-urls "http://127.0.0.1:$ep" --initial-advertise-peer-urls "http://127.0.0.1:$ep" \
  --initial-cluster "idem=http://127.0.0.1:$ep" >"$dir/etcd.log" 2>&1 &
pids+=($!)
deadline=$(( $(date +%s) + 30 ))
until get "http://127.0.0.1:$ec/health" >/dev/null; do
  if [ "$(date +%s)" -gt "$deadline" ]; then
    echo "patroni-failover: etcd did not start:" >&2; tail -5 "$dir/etcd.log" >&2; exit 1
  fi
  sleep 0.2
done

case $MODE in
  strict) sync="synchronous_mode: true
    synchronous_mode_strict: true" ;;
  async) sync="synchronous_mode: false" ;;
  *) echo "patroni-failover: MODE is strict or async" >&2; exit 2 ;;
esac

for n in 1 2 3; do
  cat >"$dir/node$n.yml" <<YML
scope: idem-failover
name: node$n
restapi:
  listen: 127.0.0.1:${apiport[$n]}
  connect_address: 127.0.0.1:${apiport[$n]}
etcd:
  host: 127.0.0.1:$ec
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 2
    retry_timeout: 5
    maximum_lag_on_failover: 104857600
    $sync
    postgresql:
      use_pg_rewind: true
      parameters:
        max_connections: 200
        wal_log_hints: "on"
  initdb:
  - encoding: UTF8
  - locale: C
  pg_hba:
  - host replication replicator 127.0.0.1/32 trust
  - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:${pgport[$n]}
  connect_address: 127.0.0.1:${pgport[$n]}
  data_dir: $dir/node$n
  bin_dir: $bin
  pgpass: $dir/pgpass$n
  authentication:
    superuser: {username: postgres, password: postgres}
    replication: {username: replicator, password: replicator}
    rewind: {username: postgres, password: postgres}
  parameters:
    unix_socket_directories: '$dir'
YML
  chown "$owner" "$dir/node$n.yml"
  "${as[@]}" patroni "$dir/node$n.yml" >"$dir/node$n.log" 2>&1 &
  pids+=($!)
  sleep 2 # the first node bootstraps the cluster, the others copy it
done

leader() {
  for n in 1 2 3; do
    if get "http://127.0.0.1:${apiport[$n]}/leader" >/dev/null; then
      echo "$n"; return
    fi
  done
}
# running counts the cluster's members that run (Patroni 3.0 says
# "running" of a streaming replica, later releases "streaming").
running() {
  { get "http://127.0.0.1:${apiport[$1]}/cluster" || true; } | grep -Eo '"state": *"(running|streaming)"' | wc -l
}
deadline=$(( $(date +%s) + 120 ))
while [ "$(date +%s)" -le "$deadline" ]; do
  l=$(leader)
  [ -n "$l" ] && [ "$(running "$l")" = 3 ] && break
  l=
  sleep 1
done
[ -n "${l:-}" ] || { echo "patroni-failover: no leader; see $dir/node*.log" >&2; tail -20 "$dir"/node*.log >&2; exit 1; }
echo "patroni-failover: node$l leads, two replicas streaming ($MODE)"

dsn="postgres://postgres:postgres@127.0.0.1:$pg1,127.0.0.1:$pg2,127.0.0.1:$pg3/postgres?sslmode=disable&target_session_attrs=read-write"
go build -o "$dir/idem-bench" ./cmd/idem-bench
started=$(date +%s)
"$dir/idem-bench" -fleet 3 -fleet-ops "$OPS" -fleet-concurrency 16 -fleet-latency 200ms -runs 1 -progress=false -pg "$dsn" \
  -json >"$dir/bench.json" 2>"$dir/bench.err" &
bench=$!
sleep "$KILL_AFTER"
l=$(leader)
echo "patroni-failover: SIGKILL of node$l's Patroni and postmaster, $KILL_AFTER s into the batch"
pm=$(postmaster "$l")
kill -KILL "$(patroni_pid "$l")" || true
[ -n "$pm" ] && kill -KILL "$pm" || true
deadline=$(( $(date +%s) + 120 ))
while [ "$(date +%s)" -le "$deadline" ]; do
  nl=$(leader)
  [ -n "$nl" ] && [ "$nl" != "$l" ] && break
  nl=
  sleep 1
done
echo "patroni-failover: node${nl:-?} leads $(( $(date +%s) - started - KILL_AFTER )) s after the kill"
status=0
wait "$bench" || status=$?
cat "$dir/bench.err"
read -r applied sent took < <(python3 -c 'import json, sys
row = json.load(open(sys.argv[1]))["rows"][0]
print(row["applied"][0], "+".join(map(str, row["sent"])), "%.1fs" % (row["median_ns"] / 1e9))' "$dir/bench.json" 2>/dev/null) || true
echo "patroni-failover: the batch took ${took:-?} (the processes sent ${sent:-?}), exit status $status; the server applied ${applied:-?} of $OPS"
[ "$status" = 0 ] && [ "${applied:-}" = "$OPS" ] || { [ "$MODE" = async ] && echo "patroni-failover: as F12 says for async replication"; exit 1; }
