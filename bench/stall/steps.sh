#!/usr/bin/env bash
# make bench's order, short, up to its 50% steps: BIN LABEL [READ_RATE] [WRITE_RATE]
# A one-shard server (CPU 0, RUST_LOG=info,amphora_storage=debug) gets make bench's
# populate and major compaction, then 30 s each of uniform reads, writes and mixed 50/50 at
# saturation from `amphora stress` (CPU 1, 128 in flight), a flush and 20 s idle, then 30 s
# of fixed-rate reads at READ_RATE/s (9700) and writes at WRITE_RATE/s (8700). Prints, per
# fixed step, the transparent huge page faults it caused (/proc/vmstat), its p99 / p99.9 /
# max and each second's maximum, then how often the shard returned its kept pages to the OS.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 rrate=${3:-9700} wrate=${4:-8700}
RUST_LOG=info,amphora_storage=debug start_server "$bin" "$label"
populate_compacted
u="dist=UNIFORM(1..3000000)"
st read duration=30s no-warmup -rate threads=128 -pop "$u" > "$OUT/steps-r-$label.txt"
st write duration=30s no-warmup -rate threads=128 -pop "$u" > "$OUT/steps-w-$label.txt"
st mixed "ratio(write=1,read=1)" duration=30s no-warmup -rate threads=128 -pop "$u" > "$OUT/steps-m-$label.txt"
nt flush > /dev/null
sleep 20
thp() { awk '/^thp_fault_alloc / {print $2}' /proc/vmstat; }
for step in "read $rrate" "write $wrate"; do
  read -r op rate <<< "$step"
  f="$OUT/steps-f$op-$label.txt"
  t0=$(thp)
  st "$op" duration=30s no-warmup -rate threads=128 fixed="$rate/s" -pop "$u" > "$f"
  echo "$label $op $rate/s: THP faults $(($(thp) - t0)); $(latencies "$f")"
  echo "  each second's max ms: $(grep -E '^total' "$f" | awk -F, '{printf "%.1f ", $11}')"
done
echo "$label: kept pages returned $(grep -c "returned the shard arena" "$OUT/server-$label.log") times"
