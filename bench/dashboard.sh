#!/usr/bin/env bash
# Question (issue 38): does a browser open on the dashboard cost the request path anything?
#
# wrk -> slipstream -> nginx origin (1 KB), one worker. Two slipstream processes from the same
# build: `plain` without an admin listener, `admin` with one. Phase `browser-off` runs both with
# no browser; phase `browser-on` keeps a headless Chromium open on `admin`'s dashboard, which
# polls /api/stats every 2 s (its default). Rounds alternate the order of the two instances.
# Columns: req/s, p50, p99 (wrk --latency), the worker thread's CPU per request (schedstat of
# the thread named worker-0), the admin thread's CPU in ms per second of the run, and HAProxy
# and nginx (tuned, no log) in the same rounds for scale. The browser's own CPU weighs on every
# row of its phase: what differs between `plain` and `admin` within a phase is the dashboard's
# cost.
#
# Usage: bench/dashboard.sh [seconds per run, default 10] [connections, default 50]
# ROUNDS=N (default 3). Installs nginx, haproxy, wrk and chromium when missing (needs root).
set -euo pipefail
DURATION=${1:-10}
CONNS=${2:-50}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-bench-dashboard}
ORIGIN=18200 PLAIN=18201 ADMIN=18202 ADMIN_API=18203 NGX=18204 HAP=18205
ROUNDS=${ROUNDS:-3}

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
command -v chromium >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
(cd "$ROOT" && cargo build --release -q)
BIN=$ROOT/target/release/slipstream

rm -rf "$WORK" && mkdir -p "$WORK/www" "$WORK/logs"
head -c 1024 /dev/zero | tr '\0' 'a' > "$WORK/www/1k"
write_origin_conf "$WORK/origin.conf" $ORIGIN "$WORK/www"
write_proxy_conf "$WORK/nginx.conf" $NGX $ORIGIN "access_log off;" "proxy_buffers 4 128k;"
{
    haproxy_head 1
    cat <<EOF
frontend fe
    bind 127.0.0.1:$HAP
    default_backend be
backend be
    server origin 127.0.0.1:$ORIGIN maxconn 1000
EOF
} > "$WORK/haproxy.cfg"
trap 'cleanup; pkill -f "$WORK/chromium" || true' EXIT
nginx -c "$WORK/origin.conf" & PIDS+=($!)
nginx -c "$WORK/nginx.conf" & PIDS+=($!)
haproxy -f "$WORK/haproxy.cfg" -db & PIDS+=($!)
"$BIN" proxy --listen 127.0.0.1:$PLAIN --upstream 127.0.0.1:$ORIGIN --workers 1 2>"$WORK/logs/plain.log" & PIDS+=($!)
PLAIN_PID=$!
"$BIN" proxy --listen 127.0.0.1:$ADMIN --upstream 127.0.0.1:$ORIGIN --workers 1 \
    --admin 127.0.0.1:$ADMIN_API 2>"$WORK/logs/admin.log" & PIDS+=($!)
ADMIN_PID=$!
sleep 1

# On-CPU nanoseconds of the threads of process $1 named $2 (schedstat).
thread_ns() {
    local total=0 t
    for t in /proc/"$1"/task/*; do
        if [ "$(cat "$t/comm")" = "$2" ]; then total=$((total + $(cut -d' ' -f1 "$t/schedstat"))); fi
    done
    echo "$total"
}

run() { # name port -> "name req/s p50us p99us worker_us_per_req admin_ms_per_s"
    local name=$1 port=$2 pid="" w0=0 a0=0
    wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$port/1k" >/dev/null
    case $name in plain) pid=$PLAIN_PID ;; admin) pid=$ADMIN_PID ;; esac
    if [ -n "$pid" ]; then w0=$(thread_ns "$pid" worker-0); a0=$(thread_ns "$pid" admin); fi
    wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:$port/1k" > "$WORK/wrk.txt"
    local rps reqs p50 p99 w=- a=-
    rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk.txt")
    reqs=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
    p50=$(awk '$1=="50%" {print $2}' "$WORK/wrk.txt" | to_us)
    p99=$(awk '$1=="99%" {print $2}' "$WORK/wrk.txt" | to_us)
    if [ -n "$pid" ]; then
        w=$(awk -v d=$(($(thread_ns "$pid" worker-0) - w0)) -v n="$reqs" 'BEGIN { printf "%.1f", d/1000/n }')
        a=$(awk -v d=$(($(thread_ns "$pid" admin) - a0)) -v s="$DURATION" 'BEGIN { printf "%.3f", d/1e6/s }')
    fi
    echo "$name $rps $p50 $p99 $w $a"
}

TARGETS=(plain:$PLAIN admin:$ADMIN nginx-tuned:$NGX haproxy:$HAP)
printf '\nwrk -t1 -c%s -d%ss, 1 KB through each proxy to an nginx origin; one worker each; %s cores\n' "$CONNS" "$DURATION" "$(nproc)"
printf 'Each cell is the mean of %s rounds; rounds alternate the order.\n\n' "$ROUNDS"
printf '| %-11s | %-11s | %9s | %8s | %8s | %14s | %14s |\n' phase proxy 'req/s' 'p50 us' 'p99 us' 'worker us/req' 'admin ms/s'
printf '|%s|\n' '-------------|-------------|-----------|----------|----------|----------------|----------------'
for phase in browser-off browser-on; do
    if [ $phase = browser-on ]; then
        chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
            --user-data-dir="$WORK/chromium" --remote-debugging-port=0 \
            "http://127.0.0.1:$ADMIN_API/" >/dev/null 2>&1 & PIDS+=($!)
        sleep 5
        curl -sf "http://127.0.0.1:$ADMIN_API/api/stats" >/dev/null
    fi
    : > "$WORK/results"
    for round in $(seq 1 "$ROUNDS"); do
        order=("${TARGETS[@]}")
        if [ $((round % 2)) -eq 0 ]; then order=(); for ((i = ${#TARGETS[@]} - 1; i >= 0; i--)); do order+=("${TARGETS[$i]}"); done; fi
        for target in "${order[@]}"; do run "${target%%:*}" "${target##*:}" >> "$WORK/results"; done
    done
    for target in "${TARGETS[@]}"; do
        awk -v name="${target%%:*}" -v phase=$phase '
            $1==name { n++; rps+=$2; p50+=$3; p99+=$4; if ($5 != "-") { w+=$5; a+=$6 } else { dash=1 } }
            END {
                ws = dash ? "-" : sprintf("%.1f", w/n); as = dash ? "-" : sprintf("%.3f", a/n)
                printf "| %-11s | %-11s | %9.0f | %8.0f | %8.0f | %14s | %14s |\n", phase, name, rps/n, p50/n, p99/n, ws, as
            }' "$WORK/results"
    done
done
