#!/usr/bin/env bash
# Balancing comparison: four upstreams, one of them answering 50 ms late, wrk at fixed
# connections through each balancer; one worker (thread) per proxy.
#
#   slipstream-rr    balance = "round_robin"
#   slipstream-lc    balance = "least_conn"
#   slipstream-p2c   the default (P2C over latency and in-flight requests)
#   nginx-lc         nginx `least_conn` with a keepalive pool
#   nginx-rr         nginx round robin, for reference
#   haproxy-lc       HAProxy `balance leastconn`, `http-reuse always`
#
# The upstreams are examples/bench_upstream (single-threaded tokio, 64 B bodies): three answer
# at once (one process), one after 50 ms. Columns: req/s, p50, p99 and p99.9, the share of requests that
# took 50 ms or more (what the slow server served), and proxy CPU microseconds per request.
#
# Usage: bench/balance.sh [seconds per run, default 10] [connections, default 50]
# ROUNDS=N (default 2) alternates the order of the proxies; PROXIES="..." narrows the run.
# Installs nginx, haproxy, wrk and perf with apt-get when missing (needs root).
set -euo pipefail
DURATION=${1:-10}
CONNS=${2:-50}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-balance}
UP=(18101 18102 18103 18104) # the last one is slow
SLIP_RR=18111 SLIP_LC=18112 SLIP_P2C=18113 NGX_LC=18114 NGX_RR=18115 HAP_LC=18116

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
(cd "$ROOT" && cargo build --release -q && cargo build --release -q --example bench_upstream)
rm -rf "$WORK" && mkdir -p "$WORK"

# The three fast upstreams share one thread, so the 2-core machine is not crowded with busy
# processes (scheduling delays would then dominate every percentile).
"$ROOT/target/release/examples/bench_upstream" "127.0.0.1:${UP[0]},127.0.0.1:${UP[1]},127.0.0.1:${UP[2]}" 2>/dev/null & PIDS+=($!)
"$ROOT/target/release/examples/bench_upstream" "127.0.0.1:${UP[3]}" --delay-ms 50 2>/dev/null & PIDS+=($!)

slip_start() { # port balance
    cat > "$WORK/slip-$2.toml" <<EOF
workers = 1
[[listen]]
address = "127.0.0.1:$1"
[upstreams.app]
servers = ["127.0.0.1:${UP[0]}", "127.0.0.1:${UP[1]}", "127.0.0.1:${UP[2]}", "127.0.0.1:${UP[3]}"]
balance = "$2"
[[sites]]
default = true
routes = [{ path = "/", upstream = "app" }]
EOF
    "$ROOT/target/release/slipstream" run --config "$WORK/slip-$2.toml" 2>"$WORK/slip-$2.log" &
    PIDS+=($!)
}
slip_start $SLIP_RR round_robin
SLIP_RR_PID=$!
slip_start $SLIP_LC least_conn
SLIP_LC_PID=$!
slip_start $SLIP_P2C p2c
SLIP_P2C_PID=$!

nginx_start() { # port method-directive
    cat > "$WORK/nginx-$1.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/nginx-$1.pid;
error_log $WORK/nginx-$1.error.log;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    upstream app {
        $2
        server 127.0.0.1:${UP[0]}; server 127.0.0.1:${UP[1]};
        server 127.0.0.1:${UP[2]}; server 127.0.0.1:${UP[3]};
        keepalive 256;
    }
    server {
        listen 127.0.0.1:$1 reuseport;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
    nginx -c "$WORK/nginx-$1.conf" &
    PIDS+=($!)
}
nginx_start $NGX_LC "least_conn;"
nginx_start $NGX_RR ""
{
    haproxy_head 1 "http-reuse always"
    cat <<EOF
frontend fe
    bind 127.0.0.1:$HAP_LC
    default_backend be
backend be
    balance leastconn
    server s0 127.0.0.1:${UP[0]} maxconn 1000
    server s1 127.0.0.1:${UP[1]} maxconn 1000
    server s2 127.0.0.1:${UP[2]} maxconn 1000
    server s3 127.0.0.1:${UP[3]} maxconn 1000
EOF
} > "$WORK/haproxy.cfg"
haproxy -f "$WORK/haproxy.cfg" -db & PIDS+=($!)
sleep 1

proxy_pids() {
    case $1 in
        "$SLIP_RR") echo "$SLIP_RR_PID" ;;
        "$SLIP_LC") echo "$SLIP_LC_PID" ;;
        "$SLIP_P2C") echo "$SLIP_P2C_PID" ;;
        *) listener_pids "$1" ;;
    esac
}

run() { # port -> "req/s p50us p99us p999us slow_share cpu_us_per_req"
    local port=$1 pids before after
    wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$port/" >/dev/null # warm pools and latency figures
    pids=$(proxy_pids "$port")
    # shellcheck disable=SC2086
    before=$(cpu_ns $pids)
    wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency -s "$ROOT/bench/percentiles.lua" \
        "http://127.0.0.1:$port/" > "$WORK/wrk.txt"
    # shellcheck disable=SC2086
    after=$(cpu_ns $pids)
    local rps reqs p50 p99 p999 slow
    rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk.txt")
    reqs=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
    p50=$(awk '$1=="50%" {print $2}' "$WORK/wrk.txt" | to_us)
    p99=$(awk '$1=="99%" {print $2}' "$WORK/wrk.txt" | to_us)
    p999=$(awk '$1=="p99.9" {print $2}' "$WORK/wrk.txt")
    slow=$(awk '$1=="slow_share" {print $2}' "$WORK/wrk.txt")
    awk -v rps="$rps" -v p50="$p50" -v p99="$p99" -v p999="$p999" -v slow="$slow" \
        -v cpu=$((after - before)) -v n="$reqs" \
        'BEGIN { printf "%s %s %s %s %s %.1f\n", rps, p50, p99, p999, slow, cpu/1000/n }'
}

ROUNDS=${ROUNDS:-2}
TARGETS=(slipstream-rr:$SLIP_RR slipstream-lc:$SLIP_LC slipstream-p2c:$SLIP_P2C nginx-lc:$NGX_LC nginx-rr:$NGX_RR haproxy-lc:$HAP_LC)
selected() { [ -z "${PROXIES:-}" ] && return 0; case " $PROXIES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

printf '\nwrk -t1 -c%s -d%ss; 4 upstreams, one answering 50 ms late; one worker per proxy; %s cores\n' "$CONNS" "$DURATION" "$(nproc)"
printf 'Each cell is the mean of %s rounds; rounds alternate the order of the proxies.\n' "$ROUNDS"
printf '"slow share": requests that took 50 ms or more (the slow server'"'"'s share).\n\n'
printf '| %-15s | %9s | %8s | %9s | %10s | %10s | %10s |\n' proxy 'req/s' 'p50 us' 'p99 us' 'p99.9 us' 'slow share' 'CPU us/req'
printf '|%s|\n' '-----------------|-----------|----------|-----------|------------|------------|------------'
: > "$WORK/results"
for round in $(seq 1 "$ROUNDS"); do
    order=("${TARGETS[@]}")
    if [ $((round % 2)) -eq 0 ]; then
        order=()
        for ((i = ${#TARGETS[@]} - 1; i >= 0; i--)); do order+=("${TARGETS[$i]}"); done
    fi
    for target in "${order[@]}"; do
        name=${target%%:*} port=${target##*:}
        selected "$name" || continue
        echo "$name $(run "$port")" >> "$WORK/results"
    done
done
for target in "${TARGETS[@]}"; do
    name=${target%%:*}
    selected "$name" || continue
    awk -v name="$name" '
        $1==name { n++; rps+=$2; p50+=$3; p99+=$4; p999+=$5; slow+=$6; cpu+=$7 }
        END { printf "| %-15s | %9.0f | %8.0f | %9.0f | %10.0f | %9.2f%% | %10.1f |\n", name, rps/n, p50/n, p99/n, p999/n, 100*slow/n, cpu/n }' "$WORK/results"
done
