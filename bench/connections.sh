#!/usr/bin/env bash
# Question: what does a connection cost the proxy in memory, idle and mid-download?
#
# Starts an nginx origin and `slipstream proxy` (one worker), then bench/connections.py opens
# IDLE keep-alive connections (one small request each) and reports RSS growth per connection,
# then SLOW concurrent downloads of a 100 MB file read at 16 KiB/s and reports peak RSS.
# The open-file limit bounds SLOW: each download holds a client socket, an upstream socket and,
# with splice, two pipe ends.
#
# Usage: bench/connections.sh [idle, default 10000] [slow, default 4000] [seconds, default 10]
# SLIPSTREAM_BIN=/path/to/slipstream measures another build.
set -euo pipefail
IDLE=${1:-10000}
SLOW=${2:-4000}
SECONDS_SLOW=${3:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-connections}
ORIGIN=18200 SLIP=18201

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
(cd "$ROOT" && cargo build --release -q)
rm -rf "$WORK" && mkdir -p "$WORK/www"
: > "$WORK/www/0b"
head -c $((100 * 1024 * 1024)) /dev/urandom > "$WORK/www/big"
write_origin_conf "$WORK/origin.conf" $ORIGIN "$WORK/www" 16000
nginx -c "$WORK/origin.conf" & PIDS+=($!)
"${SLIPSTREAM_BIN:-$ROOT/target/release/slipstream}" proxy --listen 127.0.0.1:$SLIP --upstream 127.0.0.1:$ORIGIN --workers 1 2>"$WORK/slip.log" &
PIDS+=($!)
SLIP_PID=$!
sleep 1
curl -s -o /dev/null "http://127.0.0.1:$SLIP/0b"
python3 "$ROOT/bench/connections.py" idle $SLIP "$IDLE" $SLIP_PID
sleep 1
python3 "$ROOT/bench/connections.py" slow $SLIP "$SLOW" $SLIP_PID "$SECONDS_SLOW"
