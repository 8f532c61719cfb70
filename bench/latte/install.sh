#!/usr/bin/env bash
# Installs latte (https://crates.io/crates/latte-cli), the independent load generator that
# `make bench` runs next to `amphora stress` (issue 5 item 3), into bench/.tools/bin.
# Idempotent: does nothing when that version is there. The first build takes ~10 min here.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
version="${LATTE_VERSION:-0.29.0}"
bin="$root/bench/.tools/bin/latte"
if [[ -x "$bin" ]] && "$bin" --version 2>/dev/null | grep -q "$version"; then
  exit 0
fi
echo "[bench] installing latte $version (cargo install latte-cli) into bench/.tools"
cargo install latte-cli --version "$version" --locked --root "$root/bench/.tools"
