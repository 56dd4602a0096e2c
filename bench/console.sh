#!/usr/bin/env bash
# The console's render times in one command: builds the service and the
# load generator in release mode, then `loadgen console` starts the service
# on its embedded PostgreSQL, fills the archive with a million rows, times
# each console page, and rewrites the console section of bench/RESULTS.md.
# Loopback only; a few minutes. Extra arguments go to `loadgen console`.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v psql >/dev/null || { echo "psql not found: install the PostgreSQL client package" >&2; exit 1; }
cargo build --release --locked -p webhook-inbox -p loadgen
exec target/release/loadgen console "$@"
