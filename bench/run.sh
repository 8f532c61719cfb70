#!/usr/bin/env bash
# Amphora vs Apache Cassandra 5.0, side by side, with the seeds' methodology (DESIGN.md §7,
# issue 5 item 2). `make bench-quick` = `bench/run.sh quick` (under 15 min), `make bench` =
# `bench/run.sh full` (about 1.5 h). See docs/benchmarks.md for what it measures and reports.
#
# Steps: build release `amphora` (server + `amphora stress`), install Cassandra from Maven
# Central if needed, then bench/lib/harness.py runs each server in turn pinned to CPU 0 with
# the load generator pinned to CPU 1, and bench/lib/report.py writes
# bench/results/<UTC date-time>/report.md + SVG plots and puts the summary on top of
# docs/benchmarks.md.
#
# Environment (all optional):
#   BENCH_SYSTEMS=cassandra,amphora   which servers, in this order (Cassandra first: the
#                                     fixed-rate steps are % of its measured maximum)
#   BENCH_HEAP=2G                     Cassandra -Xmx/-Xms and Amphora --memory
#   BENCH_SMP=1                       Amphora --smp
#   BENCH_SERVER_CPUS=0 BENCH_CLIENT_CPUS=1   taskset CPU lists
#   BENCH_PARTITIONS, BENCH_WARMUP_S, BENCH_SAT_S, BENCH_STEP_S, BENCH_RDW_S, BENCH_IOT_S,
#   BENCH_IOT_PARTITIONS, BENCH_THREADS       override the mode's scale
#   BENCH_CASSANDRA_PORT=9042 BENCH_CASSANDRA_JMX_PORT=7199 BENCH_CASSANDRA_STORAGE_PORT=7000
#   BENCH_AMPHORA_PORT=29042 BENCH_AMPHORA_SHARD_PORT=29043 BENCH_AMPHORA_PROMETHEUS_PORT=29180
#   BENCH_WORK=bench/work             server data dirs (wiped per system; BENCH_KEEP_DATA=1 keeps)
#   BENCH_SKIP_BUILD=1                use the existing target/release/amphora (AMPHORA_BIN=...)
#   BENCH_NO_LATTE=1                  skip latte (bench/latte/install.sh installs it otherwise)
#   BENCH_LATTE_ROWS, BENCH_LATTE_S   latte's table size and run length
#   BENCH_NO_DOCS=1                   do not touch docs/benchmarks.md
#   BENCH_METRICS_POLL=0              no amphora-metrics-per-second.log next to the report
#                                     (bench/stall/metricspoll.sh beside Amphora's runs)
set -euo pipefail
mode="${1:-quick}"
case "$mode" in quick|full) ;; *) echo "usage: $0 quick|full" >&2; exit 2 ;; esac
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

[[ "$(nproc)" -ge 2 ]] || { echo "bench needs 2 CPUs (server and client on separate cores)" >&2; exit 1; }
command -v taskset >/dev/null || { echo "taskset (util-linux) is required" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is required" >&2; exit 1; }

if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  echo "[bench] cargo build --release -p amphora"
  cargo build --release -p amphora
fi
[[ -n "${AMPHORA_BIN:-}" ]] && export AMPHORA_BIN_GIVEN="$AMPHORA_BIN"
bin="${AMPHORA_BIN:-$root/target/release/amphora}"
[[ -x "$bin" ]] || { echo "no amphora binary at $bin" >&2; exit 1; }
if ! "$bin" --help 2>/dev/null | grep -qw stress; then
  echo "$bin has no working 'stress' subcommand (crates/stress): cannot run the benchmark" >&2
  exit 1
fi

if [[ ",${BENCH_SYSTEMS:-cassandra,amphora}," == *,cassandra,* ]]; then
  bench/cassandra/install.sh
fi
if [[ "${BENCH_NO_LATTE:-0}" != 1 ]]; then
  bench/latte/install.sh || echo "[bench] latte could not be installed: its runs are recorded as not available" >&2
else
  export LATTE_BIN=/nonexistent
fi

# A private copy: another engineer's `cargo build` must not swap the binary mid-run.
work="${BENCH_WORK:-$root/bench/work}"
mkdir -p "$work"
cp -p "$bin" "$work/amphora-bin.tmp" && mv "$work/amphora-bin.tmp" "$work/amphora-bin"
bin="$work/amphora-bin"

echo "[bench] machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(uptime)"
export AMPHORA_BIN="$bin"
exec python3 "$root/bench/lib/harness.py" "$mode"
