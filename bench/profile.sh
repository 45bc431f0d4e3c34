#!/usr/bin/env bash
# Question: where does a proxy's CPU per request go, next to the floor relay's?
#
# wrk -t1 -c50 -> proxy -> nginx origin (one worker each), as in bench/compare.sh, while
# `perf record -e cpu-clock --call-graph dwarf` samples the proxy for a few seconds. Prints, per
# proxy, the share of samples in the kernel, the proxy's own code, libc and the vDSO (the clock),
# then the top user-space symbols by self time. Proxies: slipstream (`BIN=` another build) and
# floor-epoll (../shared/floor's relay_epoll, no HTTP).
#
# Usage: bench/profile.sh [size: 0b | 1k | 91k, default 0b] [seconds, default 4]
# IO=uring profiles slipstream's io_uring path (`--io uring`).
# The perf data stays in $WORK (default /tmp/slipstream-profile) for `perf report -i`.
set -euo pipefail
SIZE=${1:-0b}
SECS=${2:-4}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-profile}
FLOOR_SRC=${FLOOR_SRC:-$ROOT/../shared/floor}
ORIGIN=18400 SLIP=18401 FLOOR=18402

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
if [ -z "${BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release -q)
    BIN=$ROOT/target/release/slipstream
fi
rm -rf "$WORK" && mkdir -p "$WORK/www"
: > "$WORK/www/0b"
head -c 1024 /dev/zero | tr '\0' 'a' > "$WORK/www/1k"
{ head -c 93184 /dev/urandom | base64 -w 100 || true; } | head -c 93184 > "$WORK/www/91k"
write_origin_conf "$WORK/origin.conf" $ORIGIN "$WORK/www"
nginx -c "$WORK/origin.conf" & PIDS+=($!)
"$BIN" proxy --listen 127.0.0.1:$SLIP --upstream 127.0.0.1:$ORIGIN --workers 1 --io "${IO:-epoll}" \
    2>"$WORK/slipstream.log" & PIDS+=($!)
SLIP_PID=$!
TARGETS="slipstream:$SLIP:$SLIP_PID"
if "$FLOOR_SRC/build.sh" "$WORK/floor" >/dev/null 2>&1; then
    "$WORK/floor/relay_epoll" $FLOOR $ORIGIN & PIDS+=($!)
    TARGETS="$TARGETS floor-epoll:$FLOOR:$!"
fi
sleep 1

for target in $TARGETS; do
    IFS=: read -r name port pid <<< "$target"
    wrk -t1 -c50 -d2s "http://127.0.0.1:$port/$SIZE" >/dev/null
    perf record -q -F 4000 -e cpu-clock --call-graph dwarf,16384 -o "$WORK/$name.data" -p "$pid" -- sleep "$SECS" >/dev/null 2>&1 &
    perf_pid=$!
    rps=$(wrk -t1 -c50 -d"$((SECS + 1))s" "http://127.0.0.1:$port/$SIZE" | awk '/Requests\/sec/ {print $2}')
    wait "$perf_pid" || true
    printf '\n### %s, %s response, %s req/s\n\n' "$name" "$SIZE" "$rps"
    perf report -i "$WORK/$name.data" --no-children --sort dso --stdio -g none 2>/dev/null |
        awk '$1 ~ /%$/ { printf "%-10s %s\n", $1, $2 }'
    echo
    perf report -i "$WORK/$name.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null |
        awk '$1 ~ /%$/ && $3 == "[.]" && n++ < 25 { $2 = ""; $3 = ""; print }'
done
