#!/usr/bin/env bash
# Forwarding's rows in one command: builds the service and the load generator
# in release mode, then `loadgen forwarding` starts the service on its
# embedded PostgreSQL with one destination at a receiver on loopback that
# answers at once, and measures the forwarding rate, intake with the
# destination against intake without, the lag from recorded to delivered
# under steady load, and peak RSS with 100,000 pending jobs; it rewrites the
# forwarding section of bench/RESULTS.md and the forwarding line of
# docs/performance.md. Then `loadgen backfill` records 100,000 events with no
# destination, declares one, backfills it and measures the lag of live events
# sent meanwhile and the backfill's drain rate: its row of bench/RESULTS.md and
# its line of docs/performance.md.
# Loopback only; several minutes. Extra arguments go to `loadgen forwarding`
# (a quick try: `--runs 1 --jobs 2000 --intake-events 2000 --lag-seconds 5
# --pending 5000 --no-write`; see `target/release/loadgen forwarding --help`;
# only `--no-write` also goes to `loadgen backfill`, tried alone with
# `target/release/loadgen backfill --events 2000 --no-write`).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v psql >/dev/null || { echo "psql not found: install the PostgreSQL client package" >&2; exit 1; }
cargo build --release --locked -p webhook-inbox -p loadgen
target/release/loadgen forwarding "$@"
backfill=()
for arg in "$@"; do
    [ "$arg" = --no-write ] && backfill+=(--no-write)
done
exec target/release/loadgen backfill "${backfill[@]}"
