#!/usr/bin/env bash
# Runs the compatibility suites: real clients against a real server.
#
#   tests/compat/run.sh [--peer NAME] [SUITE...]
#
# Suites: python-datastax python-scylla go java node (default: all; run install.sh first),
# restart (default when run.sh starts the server: data survives SIGTERM + restart), and
# shard-proxy (not default: checks the shard tests through a fake sharded proxy).
#
# Without COMPAT_TARGET it starts a fresh `amphora server` (binary from AMPHORA_BIN, else
# target/release/amphora, else target/debug/amphora) with a temporary data dir and free
# ports, runs the suites against it and stops it. With COMPAT_TARGET=host:port it uses an
# already running server instead (e.g. Apache Cassandra from bench/cassandra/start.sh);
# `--peer cassandra` (or COMPAT_PEER=cassandra) then skips the ScyllaDB-extension checks.
#
# Other environment: COMPAT_SMP (shards of the started server, default 2),
# COMPAT_METRICS_URL (Prometheus endpoint, for COMPAT_TARGET runs), COMPAT_KEEP=1 (keep the
# data dir and server log), COMPAT_SUITE_TIMEOUT (seconds per suite, default 300).
# Exit status: 0 only if every selected suite passed.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=../lib/net.sh
source "$repo/tests/lib/net.sh"

peer="${COMPAT_PEER:-}"
suites=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --peer) peer="$2"; shift 2 ;;
    --peer=*) peer="${1#--peer=}"; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) suites+=("$1"); shift ;;
  esac
done
if [[ ${#suites[@]} -eq 0 ]]; then
  suites=(python-datastax python-scylla go java node)
  [[ -n "${COMPAT_TARGET:-}" ]] || suites+=(restart)
fi
suite_timeout="${COMPAT_SUITE_TIMEOUT:-300}"

server_pid=""
workdir=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null
    for _ in $(seq 40); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$server_pid" 2>/dev/null; then
      echo "amphora did not stop on SIGTERM within 20 s; killing it" >&2
      kill -KILL "$server_pid" 2>/dev/null
    fi
    wait "$server_pid" 2>/dev/null
  fi
  if [[ -n "$workdir" && "${COMPAT_KEEP:-0}" != 1 ]]; then
    rm -rf "$workdir"
  elif [[ -n "$workdir" ]]; then
    echo "kept $workdir"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM



start_server() { # starts amphora on $workdir/data with the chosen ports
  "$bin" server --data-dir "$workdir/data" --listen-address 127.0.0.1 \
    --native-transport-port "$cql_port" --native-shard-aware-transport-port "$aware_port" \
    --api-port "$api_port" --prometheus-port "$prom_port" --smp "$smp" --memory 1G \
    --commitlog-sync batch >>"$workdir/server.log" 2>&1 &
  server_pid=$!
  wait_for_port 127.0.0.1 "$cql_port" 60 "$server_pid"
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    [[ $rc -eq 2 ]] && echo "amphora exited during startup:" >&2 \
                    || echo "amphora did not open port $cql_port within 60 s:" >&2
    tail -40 "$workdir/server.log" >&2
    COMPAT_KEEP=1
    return 1
  fi
}

stop_server() { # SIGTERM; returns the exit status, or 124 if it had to be killed
  local rc
  kill -TERM "$server_pid"
  for _ in $(seq 40); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid"; wait "$server_pid" 2>/dev/null; server_pid=""
    return 124
  fi
  wait "$server_pid"; rc=$?
  server_pid=""
  return $rc
}

if [[ -n "${COMPAT_TARGET:-}" ]]; then
  export COMPAT_HOST="${COMPAT_TARGET%:*}"
  export COMPAT_PORT="${COMPAT_TARGET##*:}"
  export COMPAT_PEER="${peer:-external}"
  export COMPAT_METRICS_URL="${COMPAT_METRICS_URL:-http://$COMPAT_HOST:9180/metrics}"
  if ! wait_for_port "$COMPAT_HOST" "$COMPAT_PORT" 5 ""; then
    echo "nothing listens on $COMPAT_TARGET" >&2
    exit 1
  fi
  echo "compat: using running server $COMPAT_TARGET (peer: $COMPAT_PEER)"
else
  bin="${AMPHORA_BIN:-}"
  if [[ -z "$bin" ]]; then
    for b in "$repo/target/release/amphora" "$repo/target/debug/amphora"; do
      [[ -x "$b" ]] && { bin="$b"; break; }
    done
  fi
  [[ -n "$bin" && -x "$bin" ]] || {
    echo "no amphora binary: set AMPHORA_BIN or build target/{release,debug}/amphora" >&2
    exit 1
  }
  read -r cql_port aware_port api_port prom_port <<<"$(free_ports 4)"
  workdir="$(mktemp -d "${TMPDIR:-/tmp}/amphora-compat.XXXXXX")"
  smp="${COMPAT_SMP:-2}"
  start_server || exit 1
  export COMPAT_HOST=127.0.0.1 COMPAT_PORT="$cql_port" COMPAT_PEER="${peer:-amphora}"
  export COMPAT_METRICS_URL="http://127.0.0.1:$prom_port/metrics"
  echo "compat: started $bin (pid $server_pid, smp $smp) on 127.0.0.1:$cql_port," \
       "shard-aware $aware_port, metrics $prom_port, data $workdir/data"
fi

# The Java and Node drivers need the local datacenter name; ask the server.
if [[ -z "${COMPAT_DC:-}" && -x "$here/.venv-datastax/bin/python" ]]; then
  COMPAT_DC="$("$here/.venv-datastax/bin/python" - <<'EOF' 2>/dev/null
import os
from cassandra.cluster import Cluster
c = Cluster([os.environ["COMPAT_HOST"]], port=int(os.environ["COMPAT_PORT"]), connect_timeout=10)
try:
    print(c.connect().execute("SELECT data_center FROM system.local WHERE key = 'local'").one()[0])
finally:
    c.shutdown()
EOF
)"
fi
export COMPAT_DC="${COMPAT_DC:-datacenter1}"

run_suite() {
  local name="$1"
  case "$name" in
    python-datastax|python-scylla)
      local venv="$here/.venv-${name#python-}"
      [[ -x "$venv/bin/python" ]] || { echo "$venv missing: run install.sh python"; return 1; }
      (cd "$here/python" && COMPAT_CQLSH="$venv/bin/cqlsh" timeout "$suite_timeout" \
        "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider .) ;;
    go)
      (cd "$here/go" && GOMODCACHE="$here/go/.gomodcache" GOCACHE="$here/go/.gocache" \
        GOFLAGS="-modcacherw -mod=readonly" GOPROXY=off timeout "$suite_timeout" \
        go test -count=1 -v . 2>&1 | grep -Ev '^(=== RUN|=== PAUSE|=== CONT)') ;;
    java)
      (cd "$here/java" && timeout "$suite_timeout" \
        mvn -o -B --no-transfer-progress -Dmaven.repo.local="$here/.m2" test \
          | grep -E "Tests run|FAIL|ERROR|expected|Exception|BUILD") ;;
    node)
      [[ -d "$here/node/node_modules" ]] || { echo "node_modules missing: run install.sh node"; return 1; }
      (cd "$here/node" && timeout "$suite_timeout" \
        node --test --test-concurrency=1 --test-reporter=spec test/) ;;
    shard-proxy)
      # Self-check of python/test_scylla.py: runs it through tools/shard_proxy.py, a fake
      # 3-shard server in front of the target (only meaningful with COMPAT_TARGET).
      local venv="$here/.venv-scylla" pp ap mp ppid rc
      read -r pp ap mp <<<"$(free_ports 3)"
      "$venv/bin/python" "$here/tools/shard_proxy.py" --upstream "$COMPAT_HOST:$COMPAT_PORT" \
        --port "$pp" --aware-port "$ap" --metrics-port "$mp" --shards 3 &
      ppid=$!
      wait_for_port 127.0.0.1 "$pp" 10 "$ppid" || { kill "$ppid"; return 1; }
      (cd "$here/python" && COMPAT_PORT="$pp" COMPAT_PEER=shard-proxy \
        COMPAT_METRICS_URL="http://127.0.0.1:$mp/metrics" timeout "$suite_timeout" \
        "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider test_scylla.py)
      rc=$?
      kill "$ppid"; wait "$ppid" 2>/dev/null
      return $rc ;;
    restart)
      # Only when run.sh started the server: rows written before a SIGTERM are there after
      # a restart on the same data dir; SIGTERM must end the server with status 0 in 20 s.
      [[ -n "$server_pid" ]] || { echo "restart needs a server started by run.sh"; return 1; }
      local py="$here/.venv-datastax/bin/python" rc
      "$py" "$here/tools/restart_check.py" write || return 1
      stop_server; rc=$?
      if [[ $rc -ne 0 ]]; then
        echo "amphora exit status after SIGTERM: $rc (want 0; 124 = did not stop in 20 s)"
        start_server || return 1
        return 1
      fi
      echo "amphora stopped cleanly on SIGTERM; restarting on the same data dir"
      start_server || return 1
      "$py" "$here/tools/restart_check.py" read ;;
    *) echo "unknown suite $name (python-datastax python-scylla go java node shard-proxy restart)"; return 2 ;;
  esac
}

passed=()
failed=()
for s in "${suites[@]}"; do
  echo
  echo "=== compat suite: $s"
  start=$SECONDS
  if run_suite "$s"; then
    passed+=("$s")
    echo "=== $s: PASS ($((SECONDS - start)) s)"
  else
    failed+=("$s")
    echo "=== $s: FAIL ($((SECONDS - start)) s)"
  fi
  if [[ -n "$server_pid" ]] && ! kill -0 "$server_pid" 2>/dev/null; then
    echo "amphora died during suite $s; last log lines:" >&2
    tail -40 "$workdir/server.log" >&2
    server_pid=""
    COMPAT_KEEP=1
  fi
done

echo
echo "compat suites passed: ${passed[*]:-none}"
echo "compat suites failed: ${failed[*]:-none}"
if [[ ${#failed[@]} -gt 0 && -n "$workdir" ]]; then
  echo "server log: $workdir/server.log (kept)"
  COMPAT_KEEP=1
fi
echo "compat: ${#passed[@]} passed, ${#failed[@]} failed"
[[ ${#failed[@]} -eq 0 ]]
