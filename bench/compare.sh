#!/usr/bin/env bash
# Question: what does each proxy cost per request, against the same origin, in the same run?
#
# wrk -> proxy -> nginx origin serving 0 B, 1 KB and 91 KB files, all on loopback. Proxies:
#   slipstream      `slipstream proxy` with defaults (one worker, for fairness on 2 cores): plain
#                   TCP read and written through one io_uring per worker, the default
#   slipstream-epoll the same with --io epoll: tokio's reactor (the default before issue 36)
#   slipstream-log  the same with --access-log (nginx's combined format, the default): what the
#                   per-worker buffered log written by one thread costs (target: <= 3% req/s)
#   nginx-default   the field report's config (upstream keepalive, HTTP/1.1 upstream, unbuffered
#                   access log) with nginx's default proxy buffers (8 x 4k)
#   nginx-tuned     the same with the report's fix: proxy_buffers 4 128k, buffered access log
#   nginx-nolog     nginx-tuned without an access log
#   nginx-unbuflog  nginx-tuned with the report's unbuffered access log: with nginx-nolog and
#                   nginx-tuned, what nginx's log costs unbuffered and buffered
#   haproxy         mode http, one thread, keep-alive and connection reuse (its defaults)
#   slipstream-base with BASELINE=/path/to/slipstream: another build of slipstream (before a
#                   change), measured in the same rounds as the current one (BASE_IO=uring: on
#                   its io_uring path). Both builds are started afresh each round and trade
#                   ports and launch order every second round (see start_pair; ROUNDS even gives
#                   each build as many rounds in each slot); BASELINE set to the current build
#                   itself, with BASE_IO=uring, measures that noise (an A/A run). The other
#                   rows stay long-lived processes, in fixed slots
#   floor-epoll, floor-uring  the blind TCP relays of ../shared/floor (no HTTP): the floor any
#                   proxy's CPU per request is judged against (when that folder is there)
#   floor-hybrid    bench/hybrid_relay: the same blind relay on tokio's current-thread runtime
#                   with its socket I/O on io_uring, the design of slipstream's io_uring path
#   slipstream-dash with DASHBOARD=1 (issue 38): slipstream with its admin listener, and a
#                   headless Chromium kept open on its dashboard for the whole run, polling
#                   /api/stats every 2 s (its default), against `slipstream` without one in the
#                   same rounds. The browser runs through every row, so its CPU weighs on all.
# Columns: req/s, ratio to direct, p50, p99 (wrk --latency), proxy CPU microseconds per request
# (sum of the proxy's threads' schedstat run time), proxy syscalls per request (perf stat -e
# raw_syscalls:sys_enter on the proxy's processes during the same run).
#
# Usage: bench/compare.sh [seconds per run, default 10] [connections, default 50]
# WRK_THREADS=N (default 1) sets wrk's threads: issue 36's goals are at WRK_THREADS=2 with 100
# connections, the earlier tables at 1 and 50.
# SIZES="91k" or PROXIES="slipstream nginx-tuned" in the environment narrow the run; ROUNDS=N
# (default 2) repeats each cell N times, alternating the order of the proxies, and prints means;
# every run's row stays in $BENCH_DIR/rounds (size, round, then the row).
# CLOSE=1 sends `Connection: close` with every request: a new client connection per request,
# which measures the accept path (listener, accept, first read, close) instead of keep-alive.
# PIN=1 pins the proxy being measured to CPU 1, and wrk, the origin and this script to CPU 0 (as
# bench/cache.sh does): it shows how much of the run-to-run spread comes from the proxy sharing
# its CPU with the load. Issue 36's goals are stated unpinned.
# Installs nginx, haproxy, wrk and perf with apt-get when missing (needs root).
set -euo pipefail
DURATION=${1:-10}
CONNS=${2:-50}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-bench}
ORIGIN=18000 SLIP=18001 NGX_DEF=18002 NGX_TUNED=18003 HAP=18004 SLIP_LOG=18005
SLIP_BASE=18006 FLOOR_EPOLL=18007 FLOOR_URING=18008 NGX_NOLOG=18009 NGX_UNBUF=18010
FLOOR_HYBRID=18011 SLIP_EPOLL=18012 SLIP_DASH=18013 SLIP_DASH_ADMIN=18014
THREADS=${WRK_THREADS:-1}
FLOOR_SRC=${FLOOR_SRC:-$ROOT/../shared/floor}

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
(cd "$ROOT" && cargo build --release -q)
if [ "${PIN:-0}" = 1 ]; then taskset -pc 0 $$ >/dev/null; fi

rm -rf "$WORK" && mkdir -p "$WORK/www" "$WORK/logs" && : > "$WORK/rounds"
: > "$WORK/www/0b"
head -c 1024 /dev/zero | tr '\0' 'a' > "$WORK/www/1k"
{ head -c 93184 /dev/urandom | base64 -w 100 || true; } | head -c 93184 > "$WORK/www/91k"

# The report's log format and forwarding headers.
LOG_FORMAT="log_format main '\$remote_addr - \$remote_user [\$time_local] \"\$request\" '
                    '\$status \$body_bytes_sent \"\$http_referer\" '
                    '\"\$http_user_agent\" \"\$http_x_forwarded_for\"';"
FORWARD='proxy_set_header Host $host; proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;'

write_origin_conf "$WORK/origin.conf" $ORIGIN "$WORK/www"
write_proxy_conf "$WORK/nginx-default.conf" $NGX_DEF $ORIGIN \
    "$LOG_FORMAT access_log $WORK/logs/default-access.log main;" "$FORWARD"
write_proxy_conf "$WORK/nginx-tuned.conf" $NGX_TUNED $ORIGIN \
    "$LOG_FORMAT access_log $WORK/logs/tuned-access.log main buffer=64k flush=1s;" \
    "$FORWARD proxy_buffers 4 128k;"
write_proxy_conf "$WORK/nginx-nolog.conf" $NGX_NOLOG $ORIGIN "access_log off;" \
    "$FORWARD proxy_buffers 4 128k;"
write_proxy_conf "$WORK/nginx-unbuflog.conf" $NGX_UNBUF $ORIGIN \
    "$LOG_FORMAT access_log $WORK/logs/unbuf-access.log main;" "$FORWARD proxy_buffers 4 128k;"
{
    haproxy_head 1 "option forwardfor"
    cat <<EOF
frontend fe
    bind 127.0.0.1:$HAP
    default_backend be
backend be
    server origin 127.0.0.1:$ORIGIN maxconn 1000
EOF
} > "$WORK/haproxy.cfg"

nginx -c "$WORK/origin.conf" & PIDS+=($!)
nginx -c "$WORK/nginx-default.conf" & PIDS+=($!)
nginx -c "$WORK/nginx-tuned.conf" & PIDS+=($!)
nginx -c "$WORK/nginx-nolog.conf" & PIDS+=($!)
nginx -c "$WORK/nginx-unbuflog.conf" & PIDS+=($!)
haproxy -f "$WORK/haproxy.cfg" -db & PIDS+=($!)
"$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLIP --upstream 127.0.0.1:$ORIGIN --workers 1 2>"$WORK/logs/slipstream.log" & PIDS+=($!)
SLIP_PID=$!
"$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLIP_LOG --upstream 127.0.0.1:$ORIGIN --workers 1 \
    --access-log "$WORK/logs/slipstream-access.log" 2>"$WORK/logs/slipstream-log.log" & PIDS+=($!)
SLIP_LOG_PID=$!
"$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLIP_EPOLL --upstream 127.0.0.1:$ORIGIN --workers 1 \
    --io epoll 2>"$WORK/logs/slipstream-epoll.log" & PIDS+=($!)
SLIP_EPOLL_PID=$!
SLIP_DASH_PID=none
if [ "${DASHBOARD:-0}" = 1 ]; then
    command -v chromium >/dev/null || apt-get install -y -q chromium >/dev/null
    "$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLIP_DASH --upstream 127.0.0.1:$ORIGIN --workers 1 \
        --admin 127.0.0.1:$SLIP_DASH_ADMIN 2>"$WORK/logs/slipstream-dash.log" & PIDS+=($!)
    SLIP_DASH_PID=$!
    # Kept open on the dashboard: headless, with a debugging port so it stays running.
    chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
        --user-data-dir="$WORK/chromium" --remote-debugging-port=0 \
        "http://127.0.0.1:$SLIP_DASH_ADMIN/" >/dev/null 2>&1 & PIDS+=($!)
fi
SLIP_BASE_PID=none
# With a baseline, the two builds are started again before every round, and every second round
# they trade ports and launch order: where a long-lived process lands (its port, its place in
# memory, what ran before it) moved CPU per request by 5-12% between two copies of one binary,
# more than most changes measured this way. Trading slots each round averages that out.
SLOT_CUR=$SLIP SLOT_BASE=$SLIP_BASE
start_pair() { # round
    local p ready keep=()
    # The pair's old processes leave PIDS as they are stopped (cleanup kills what is in it).
    for p in "${PIDS[@]}"; do
        if [ "$p" != "$SLIP_PID" ] && [ "$p" != "$SLIP_BASE_PID" ]; then keep+=("$p"); fi
    done
    PIDS=("${keep[@]}")
    for p in "$SLIP_PID" "$SLIP_BASE_PID"; do
        if [ "$p" != none ]; then kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; fi
    done
    if [ $(($1 % 2)) -eq 1 ]; then SLOT_CUR=$SLIP SLOT_BASE=$SLIP_BASE; else SLOT_CUR=$SLIP_BASE SLOT_BASE=$SLIP; fi
    start_current() {
        "$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLOT_CUR --upstream 127.0.0.1:$ORIGIN --workers 1 2>>"$WORK/logs/slipstream.log" & PIDS+=($!)
        SLIP_PID=$!
    }
    start_base() {
        "$BASELINE" proxy --listen 127.0.0.1:$SLOT_BASE --upstream 127.0.0.1:$ORIGIN --workers 1 --io "${BASE_IO:-epoll}" 2>>"$WORK/logs/slipstream-base.log" & PIDS+=($!)
        SLIP_BASE_PID=$!
    }
    if [ $(($1 % 2)) -eq 1 ]; then start_current; start_base; else start_base; start_current; fi
    for p in $SLOT_CUR $SLOT_BASE; do
        ready=0
        for _ in $(seq 1 50); do
            if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$p/"; then ready=1; break; fi
            sleep 0.1
        done
        if [ $ready = 0 ]; then echo "no answer on port $p after a restart: see $WORK/logs" >&2; exit 1; fi
    done
}
FLOORS=""
if [ -x "$FLOOR_SRC/build.sh" ] && "$FLOOR_SRC/build.sh" "$WORK/floor" >/dev/null 2>&1; then
    "$WORK/floor/relay_epoll" $FLOOR_EPOLL $ORIGIN & PIDS+=($!)
    "$WORK/floor/relay_uring" $FLOOR_URING $ORIGIN & PIDS+=($!)
    FLOORS="floor-epoll floor-uring"
fi
if (cd "$ROOT/bench/hybrid_relay" && CARGO_TARGET_DIR="$WORK/hybrid" cargo build --release -q); then
    "$WORK/hybrid/release/hybrid-relay" $FLOOR_HYBRID $ORIGIN & PIDS+=($!)
    FLOORS="$FLOORS floor-hybrid"
fi
sleep 1

# The processes doing the proxying for a port (nginx: master and worker; the master is idle).
proxy_pids() {
    case $1 in
        $SLOT_CUR) echo "$SLIP_PID" ;;
        $SLOT_BASE) echo "$SLIP_BASE_PID" ;;
        $SLIP_LOG) echo "$SLIP_LOG_PID" ;;
        $SLIP_EPOLL) echo "$SLIP_EPOLL_PID" ;;
        $SLIP_DASH) echo "$SLIP_DASH_PID" ;;
        *) listener_pids "$1" ;;
    esac
}
# wrk's latency figure in microseconds.

WRK_HEADERS=()
if [ "${CLOSE:-0}" = 1 ]; then WRK_HEADERS=(-H "Connection: close"); fi

run() { # port path -> "req/s p50us p99us cpu_us_per_req syscalls_per_req user_us sys_us"
    local port=$1 path=$2 pids="" before after split0 split1 p
    if [ "$port" != "$ORIGIN" ]; then
        pids=$(proxy_pids "$port")
        if [ "${PIN:-0}" = 1 ]; then for p in $pids; do taskset -apc 1 "$p" >/dev/null; done; fi
    fi
    wrk -t"$THREADS" -c"$CONNS" -d2s "${WRK_HEADERS[@]}" "http://127.0.0.1:$port/$path" >/dev/null  # warm pools and buffers
    if [ "$port" != "$ORIGIN" ]; then
        # shellcheck disable=SC2086
        perf stat -e raw_syscalls:sys_enter -x, -o "$WORK/perf.txt" -p "$(echo $pids | tr ' ' ',')" -- sleep "$DURATION" 2>/dev/null &
        local perf_pid=$!
        # shellcheck disable=SC2086
        before=$(cpu_ns $pids) split0=$(user_sys_ns $pids)
    fi
    wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "${WRK_HEADERS[@]}" "http://127.0.0.1:$port/$path" > "$WORK/wrk.txt"
    local rps reqs p50 p99
    rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk.txt")
    reqs=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
    p50=$(awk '$1=="50%" {print $2}' "$WORK/wrk.txt" | to_us)
    p99=$(awk '$1=="99%" {print $2}' "$WORK/wrk.txt" | to_us)
    if [ "$port" = "$ORIGIN" ]; then
        echo "$rps $p50 $p99 - - - -"
        return
    fi
    # shellcheck disable=SC2086
    after=$(cpu_ns $pids) split1=$(user_sys_ns $pids)
    wait "$perf_pid" || true
    local sys
    sys=$(awk -F, '/raw_syscalls:sys_enter/ {print $1}' "$WORK/perf.txt")
    # perf counts over exactly DURATION seconds; wrk's run is the same length, started together.
    awk -v rps="$rps" -v p50="$p50" -v p99="$p99" -v cpu=$((after - before)) -v n="$reqs" -v sys="${sys:-0}" \
        -v times="$split0 $split1" \
        'BEGIN { split(times, t, " "); printf "%s %s %s %.1f %.1f %.1f %.1f\n", rps, p50, p99, cpu/1000/n, sys/n, (t[3]-t[1])/1000/n, (t[4]-t[2])/1000/n }'
}

ROUNDS=${ROUNDS:-2}
TARGETS=(direct:$ORIGIN slipstream:$SLIP slipstream-dash:$SLIP_DASH slipstream-epoll:$SLIP_EPOLL slipstream-base:$SLIP_BASE slipstream-log:$SLIP_LOG nginx-default:$NGX_DEF nginx-tuned:$NGX_TUNED nginx-nolog:$NGX_NOLOG nginx-unbuflog:$NGX_UNBUF haproxy:$HAP floor-epoll:$FLOOR_EPOLL floor-uring:$FLOOR_URING floor-hybrid:$FLOOR_HYBRID)
DASH_ROW=""; if [ "$SLIP_DASH_PID" != none ]; then DASH_ROW=slipstream-dash; fi
DEFAULT_PROXIES="slipstream $DASH_ROW slipstream-epoll ${BASELINE:+slipstream-base} slipstream-log nginx-default nginx-tuned haproxy $FLOORS"
selected() { case " direct ${PROXIES:-$DEFAULT_PROXIES} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

printf '\nwrk -t%s -c%s -d%ss through each proxy to an nginx origin; one worker per proxy; %s cores\n' "$THREADS" "$CONNS" "$DURATION" "$(nproc)"
if [ "${CLOSE:-0}" = 1 ]; then printf 'Every request on a new connection (Connection: close).\n'; fi
if [ "${PIN:-0}" = 1 ]; then printf 'The proxy measured pinned to CPU 1; wrk and the origin to CPU 0.\n'; fi
printf 'Each cell is the mean of %s rounds; rounds alternate the order of the proxies.\n' "$ROUNDS"
for size in ${SIZES:-0b 1k 91k}; do
    printf '\n### %s response\n\n' "$size"
    printf '| %-14s | %9s | %8s | %8s | %8s | %9s | %9s | %9s | %9s |\n' proxy 'req/s' 'vs direct' 'p50 us' 'p99 us' 'CPU us/req' 'user us/req' 'sys us/req' 'syscalls/req'
    printf '|%s|\n' '----------------|-----------|----------|----------|----------|-----------|-----------|-----------|-----------'
    : > "$WORK/results"
    for round in $(seq 1 "$ROUNDS"); do
        order=("${TARGETS[@]}")
        if [ $((round % 2)) -eq 0 ]; then
            order=("${TARGETS[0]}"); for ((i = ${#TARGETS[@]} - 1; i > 0; i--)); do order+=("${TARGETS[$i]}"); done
        fi
        if [ -n "${BASELINE:-}" ]; then start_pair "$round"; fi
        for target in "${order[@]}"; do
            name=${target%%:*} port=${target##*:}
            selected "$name" || continue
            case $name in slipstream) port=$SLOT_CUR ;; slipstream-base) port=$SLOT_BASE ;; esac
            echo "$name $(run "$port" "$size")" >> "$WORK/results"
            echo "$size $round $(tail -1 "$WORK/results")" >> "$WORK/rounds"
        done
    done
    direct=$(awk '$1=="direct" {s+=$2; n++} END {print s/n}' "$WORK/results")
    for target in "${TARGETS[@]}"; do
        name=${target%%:*}
        selected "$name" || continue
        awk -v name="$name" -v direct="$direct" '
            $1==name { n++; rps+=$2; p50+=$3; p99+=$4; if ($5 != "-") { cpu+=$5; sys+=$6; u+=$7; k+=$8 } else { dash=1 } }
            END {
                c = dash ? "-" : sprintf("%.1f", cpu/n); y = dash ? "-" : sprintf("%.1f", sys/n)
                uu = dash ? "-" : sprintf("%.1f", u/n); kk = dash ? "-" : sprintf("%.1f", k/n)
                printf "| %-14s | %9.0f | %8.2f | %8.0f | %8.0f | %9s | %9s | %9s | %9s |\n", name, rps/n, rps/n/direct, p50/n, p99/n, c, uu, kk, y
            }' "$WORK/results"
    done
done
