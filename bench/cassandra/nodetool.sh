#!/usr/bin/env bash
# nodetool from the cassandra-all jars that install.sh put in lib/ (Cassandra's NodeTool class
# over local JMX). Usage: bench/cassandra/nodetool.sh [nodetool args], e.g. `compact keyspace1`.
#   CASSANDRA_JMX_PORT  JMX port of the node (default 7199, as start.sh)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[[ -f "$(ls "$here"/lib/cassandra-all-*.jar 2>/dev/null | head -1)" ]] || {
  echo "no jars in $here/lib: run $here/install.sh first" >&2; exit 1; }
mapfile -t opens < <(grep -E '^--add-(exports|opens)' "$here/jvm.options")
tools_home="${TMPDIR:-/tmp}/amphora-nodetool-$(id -u)"
mkdir -p "$tools_home"
exec java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "${opens[@]}" \
  -Duser.home="$tools_home" -Dcassandra.logdir="$tools_home" \
  -Dlogback.configurationFile="file://$here/logback-tools.xml" \
  -cp "$here/lib/*" org.apache.cassandra.tools.NodeTool \
  -h 127.0.0.1 -p "${CASSANDRA_JMX_PORT:-7199}" "$@"
