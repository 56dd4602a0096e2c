#!/usr/bin/env bash
# Retention on a ten-million-row archive in one command: builds the service
# and the load generator in release mode, and the service as it was at
# 1f9a0c4 (before the archive was partitioned, when retention deleted rows
# in batches of 1000) in a temporary worktree, unless `--baseline PATH`
# names that binary (the build is kept in $CARGO_TARGET_DIR/baseline-1f9a0c4
# for the next run). Then `loadgen retention` starts the service on its
# embedded PostgreSQL, makes a partitioned and an unpartitioned database,
# fills each with the same 10 million rows over 10 days, explains the hot
# reads, drops the oldest day's partition with `purge`, deletes the same
# rows with the old `purge` and vacuums, and rewrites the retention section
# of bench/RESULTS.md (`--no-write`: only print it).
# Loopback only (a unix socket). About 15 minutes on 2 cores once built (the
# baseline's build adds about 6), and about 21 GB of disk at peak, in the
# temp dir, removed at the end whatever happens. Extra arguments go to `loadgen retention` (a quick try:
# `--rows 200000 --no-write`; see `loadgen retention --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v psql >/dev/null || { echo "psql not found: install the PostgreSQL client package" >&2; exit 1; }
baseline_commit=1f9a0c4
target=${CARGO_TARGET_DIR:-target}
baseline=
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --baseline) baseline=$2; shift 2 ;;
        --baseline=*) baseline=${1#--baseline=}; shift ;;
        *) args+=("$1"); shift ;;
    esac
done

work=
tree=
loadgen=
cleanup() {
    status=$?
    if [ -n "$loadgen" ] && kill -0 "$loadgen" 2>/dev/null; then
        kill -TERM "$loadgen" 2>/dev/null || true
        wait "$loadgen" 2>/dev/null || true
    fi
    if [ -n "$work" ] && [ -d "$work" ]; then
        # loadgen stops the service (and so its PostgreSQL) itself; if it was
        # killed, stop what it left running before removing the cluster.
        if [ -f "$work/service.pid" ]; then
            pid=$(cat "$work/service.pid")
            kill -TERM "$pid" 2>/dev/null && sleep 5 || true
        fi
        if [ -f "$work/pg/pgdata/postmaster.pid" ]; then
            pid=$(head -1 "$work/pg/pgdata/postmaster.pid")
            kill -INT "$pid" 2>/dev/null || true
            for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        fi
        rm -rf "$work"
    fi
    if [ -n "$tree" ]; then
        git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
        git worktree prune
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cargo build --release --locked -p webhook-inbox -p loadgen
if [ -z "$baseline" ]; then
    baseline_target=$target/baseline-$baseline_commit
    baseline=$baseline_target/release/webhook-inbox
    if [ ! -x "$baseline" ]; then
        tree=$(mktemp -d)
        rmdir "$tree"
        git worktree add --detach "$tree" "$baseline_commit" >&2
        mkdir -p "$baseline_target"
        baseline_target=$(cd "$baseline_target" && pwd)
        (cd "$tree" && CARGO_TARGET_DIR=$baseline_target cargo build --release --locked -p webhook-inbox)
        git worktree remove --force "$tree" >&2
        tree=
    fi
fi
[ -x "$baseline" ] || { echo "no baseline binary at $baseline" >&2; exit 1; }

# Readable by the PostgreSQL account the service runs its server as when we are root.
work=$(mktemp -d "${TMPDIR:-/tmp}/wib-retention.XXXXXX")
chmod 755 "$work"
"$target/release/loadgen" retention --service "$target/release/webhook-inbox" --baseline "$baseline" \
    --work-dir "$work" "${args[@]}" &
loadgen=$!
wait "$loadgen"
