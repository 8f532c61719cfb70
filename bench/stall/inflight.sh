#!/usr/bin/env bash
# Closed-loop saturation with few and many requests in flight: BIN LABEL
# A one-shard server (CPU 0, the caller's AMPHORA_* knobs reach it) gets 750k standard1
# keys and a flush, then `amphora stress` (CPU 1) runs 15 s of uniform writes and 15 s of
# uniform reads at 8, 32 and 128 in flight (`-rate threads=N`). Prints the rates. A
# closed-loop client sends its next requests only once answered, so whatever delays the
# answers (e.g. AMPHORA_IDLE_NAP_US) costs it throughput where a fixed rate would not notice.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2
start_server "$bin" "$label"
populate_chunk 0
nt flush > /dev/null
for th in 8 32 128; do
  st write duration=15s no-warmup -rate threads=$th -pop "dist=UNIFORM(1..750000)" > "$OUT/inflight-$label-w$th.txt"
  st read duration=15s no-warmup -rate threads=$th -pop "dist=UNIFORM(1..750000)" > "$OUT/inflight-$label-r$th.txt"
  echo "$label $th in flight: writes $(op_rate "$OUT/inflight-$label-w$th.txt")/s, reads $(op_rate "$OUT/inflight-$label-r$th.txt")/s"
done
