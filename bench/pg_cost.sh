#!/bin/sh
# pg_cost.sh: what one workload costs the PostgreSQL server, per durable step, in figures that
# do not move with the machine's load: heap rows, HOT updates and index entries written (from
# the WAL's own records, pg_waldump --stats), WAL bytes, and the server's CPU (utime + stime
# of every process of the cluster, the reaped backends through the postmaster; this one does
# move with load, less than wall time). With --strace, the round trips of one `mend worker`
# draining the runs (W1w): a send on its connection followed by a receive on it.
# It starts a throw-away cluster (tests/pg/cluster.sh, with pg_stat_statements for
# bench/run.lua's counts), runs bench/run.lua --one on a schema of its own, and removes the
# cluster. It must never be given a cluster it did not start.
#
#   sh bench/pg_cost.sh [--strace] WORKLOAD N [BUILD_DIR]     e.g.  sh bench/pg_cost.sh W1 10000
set -eu
strace_it=0
if [ "${1:-}" = "--strace" ]; then strace_it=1; shift; fi
w=${1:?workload}; n=${2:?number of runs}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${3:-$root/build-bench}" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mend-pgcost.XXXXXX")
state=$tmp/pg
trap 'sh "$root/tests/pg/cluster.sh" stop "$state"; rm -rf "$tmp"' EXIT
sh "$root/tests/pg/cluster.sh" start "$state" >/dev/null
dir=$(cat "$state/datadir"); port=$(cat "$state/port"); uri=$(cat "$state/uri")
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
echo "shared_preload_libraries = 'pg_stat_statements'" >> "$dir/data/postgresql.conf"
sh "$root/tests/pg/cluster.sh" restart "$state"
q() { as_pg "$bin/psql" -X -q -At -h "$dir" -p "$port" -U postgres -d mend -c "$1"; }
q "CREATE EXTENSION pg_stat_statements"
q "CREATE SCHEMA cost AUTHORIZATION mend"
db="$uri?options=-csearch_path%3Dcost"
wargs=""
if [ "$w" = W1w ]; then wargs="--workers 1"; fi
if [ $strace_it = 1 ]; then
  # MEND_BIN: the worker W1w starts, under strace; SIGTERM is passed on to it
  cat > "$tmp/mend" <<EOS
#!/bin/sh
strace -f -ttt -e trace=sendto,recvfrom -o "$tmp/strace" "$build/mend" "\$@" &
s=\$!
trap 'kill -TERM \$(pgrep -P \$s)' TERM
wait \$s; wait \$s
EOS
  chmod +x "$tmp/mend"
  export MEND_BIN="$tmp/mend"
fi
pm=$(head -1 "$dir/data/postmaster.pid")
cpu() {
  t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
  for c in $(ps -o pid= --ppid "$pm"); do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
q "CHECKPOINT"
lsn0=$(q "SELECT pg_current_wal_lsn()"); c0=$(cpu)
out=$(cd "$root" && LUA_PATH="$root/lua/?.lua;$root/lua/?/init.lua;;" LUA_CPATH="$build/lib/?.so;;" \
  lua5.4 bench/run.lua --one "$w" --n "$n" --durability full --dir "$tmp" --db "$db" $wargs | tail -1)
sleep 1
c1=$(cpu); lsn1=$(q "SELECT pg_current_wal_lsn()")
steps=$(echo "$out" | grep -o '"steps_total":[0-9]*' | cut -d: -f2)
[ -n "$steps" ] || { echo "pg_cost.sh: $w gave no steps_total: $out" >&2; exit 1; }
echo "$w n=$n: $steps steps, $(echo "$out" | grep -o '"steps_per_s":[0-9.]*' | cut -d: -f2) steps/s, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "rows/step (bench): $(echo "$out" | grep -o '"rows_per_step":[0-9.]*' | cut -d: -f2)"
echo "statements/step (bench): $(echo "$out" | grep -o '"stmts_per_step":[0-9.]*' | cut -d: -f2)"
echo "server CPU µs/step: $(echo "($c1 - $c0) * 1000000 / $(getconf CLK_TCK) / $steps" | bc)"
echo "WAL bytes/step: $(echo "$(q "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')") / $steps" | bc)"
q "SELECT relname || ': ' || n_tup_ins || ' inserted, ' || n_tup_upd || ' updated (' || n_tup_hot_upd || ' HOT)' FROM pg_stat_user_tables WHERE schemaname = 'cost' AND n_tup_ins + n_tup_upd > 0 ORDER BY relname"
q "SELECT /*bench*/ calls || ' calls, ' || round(total_exec_time::numeric, 1) || ' ms: ' || left(regexp_replace(query, '\s+', ' ', 'g'), 60) FROM pg_stat_statements WHERE query NOT LIKE '%/*bench*/%' ORDER BY total_exec_time DESC LIMIT 8"
as_pg "$bin/pg_waldump" -p "$dir/data/pg_wal" -s "$lsn0" -e "$lsn1" --stats=record 2>/dev/null |
  awk -v s="$steps" '/^(Heap|Btree)\/(INSERT|UPDATE|HOT_UPDATE|HEAP_CONFIRM|INSERT_LEAF)( |$)/ {printf "%-20s %8d  %.3f/step\n", $1, $2, $2 / s}'
if [ $strace_it = 1 ]; then
  end=$(q "SELECT max(at) FROM cost.history")
  fd=$(awk -v e="$end" '$2 <= e && $3 ~ /^sendto\(/ {print $3}' "$tmp/strace" | cut -d'(' -f2 | cut -d, -f1 | sort | uniq -c | sort -rn | head -1 | awk '{print $2}')
  rt=$(awk -v e="$end" -v fd="$fd" '$2 <= e && ($3 ~ "^sendto\\(" fd "," || $3 ~ "^recvfrom\\(" fd ",") {
    if ($3 ~ /^sendto/) sent = 1; else if (sent) { n++; sent = 0 } } END { print n + 0 }' "$tmp/strace")
  echo "round trips of the worker's connection until the last run ended: $rt, $(echo "scale=3; $rt / $n" | bc) a run"
fi
