#!/usr/bin/env bash
# The benchmark in one command: builds the service and the load generator in
# release mode, then `loadgen bench` starts the service (on its embedded
# PostgreSQL, or BENCH_DATABASE_URL), measures the pgbench ceiling and the
# service side by side at each concurrency plus a replay storm and the
# effects row again with tracing on (a second service exporting its spans
# over OTLP to a sink in the load generator), several runs
# of each with the CPU every process spent, checks the storm's effects in SQL,
# rewrites the results section of bench/RESULTS.md and the summary in
# docs/performance.md, and adds a line to the history. Loopback only; a few
# minutes per run.
# Extra arguments go to `loadgen bench` (`--runs 1 --no-write` to try a change
# quickly; see `cargo run --release -p loadgen -- bench --help`). Then the
# forwarding rows (`loadgen forwarding` and `loadgen backfill`, alone:
# bench/forwarding.sh), which write nothing either when `--no-write` is given.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v pgbench >/dev/null || { echo "pgbench not found: install the PostgreSQL client/server package" >&2; exit 1; }
cargo build --release --locked -p webhook-inbox -p loadgen
target/release/loadgen bench "$@"
forwarding=()
for arg in "$@"; do
    [ "$arg" = --no-write ] && forwarding+=(--no-write)
done
target/release/loadgen forwarding "${forwarding[@]}"
exec target/release/loadgen backfill "${forwarding[@]}"
