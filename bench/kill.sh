#!/usr/bin/env bash
# The kill test of issue 7: wrk -c50 for 8 s through a proxy in front of two upstreams; one
# upstream is SIGKILLed after 3 s. Counts the requests that failed (non-2xx or socket errors).
# Each proxy runs with two workers (threads) and the settings an operator would start with:
#
#   slipstream   `slipstream proxy --upstream A --upstream B --workers 2` (defaults)
#   nginx        upstream { A; B; keepalive } with the defaults max_fails=1 fail_timeout=10s,
#                proxy_next_upstream error timeout
#   haproxy      two servers with `check inter 1s`, `option redispatch`, `retries 3`
#
# The upstreams are examples/bench_upstream processes (64 B bodies). BASELINE=path/to/slipstream
# adds a row for another build (for example the one before balancing, which kept sending the
# dead server its share).
# Usage: bench/kill.sh [ROUNDS, default 3]. Installs nginx, haproxy and wrk when missing.
set -euo pipefail
ROUNDS=${1:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-kill}
A=18201 B=18202 PROXY=18210

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
(cd "$ROOT" && cargo build --release -q && cargo build --release -q --example bench_upstream)
rm -rf "$WORK" && mkdir -p "$WORK"
UPSTREAM="$ROOT/target/release/examples/bench_upstream"
"$UPSTREAM" 127.0.0.1:$A 2>/dev/null & PIDS+=($!)

cat > "$WORK/nginx.conf" <<EOF
worker_processes 2;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx.error.log;
events { worker_connections 4096; }
http {
    access_log off;
    upstream app { server 127.0.0.1:$A; server 127.0.0.1:$B; keepalive 64; }
    server {
        listen 127.0.0.1:$PROXY reuseport;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
{
    haproxy_head 2 "option redispatch" "retries 3"
    cat <<EOF
frontend fe
    bind 127.0.0.1:$PROXY
    default_backend be
backend be
    server a 127.0.0.1:$A check inter 1s
    server b 127.0.0.1:$B check inter 1s
EOF
} > "$WORK/haproxy.cfg"

start_proxy() { # name; sets P_PID (stdout goes to a file, so no caller waits on it)
    case $1 in
        slipstream) "$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$PROXY \
            --upstream 127.0.0.1:$A --upstream 127.0.0.1:$B --workers 2 >>"$WORK/slipstream.log" 2>&1 & ;;
        nginx) nginx -c "$WORK/nginx.conf" >>"$WORK/nginx.log" 2>&1 & ;;
        haproxy) haproxy -f "$WORK/haproxy.cfg" -db >>"$WORK/haproxy.log" 2>&1 & ;;
        slipstream-base) "$BASELINE" proxy --listen 127.0.0.1:$PROXY \
            --upstream 127.0.0.1:$A --upstream 127.0.0.1:$B --workers 2 >>"$WORK/slipstream-base.log" 2>&1 & ;;
    esac
    P_PID=$!
}

printf '\nwrk -t2 -c50 -d8s through each proxy (2 workers) to two upstreams; one SIGKILLed at 3 s\n\n'
printf '| %-10s | %5s | %9s | %8s | %13s | %13s |\n' proxy round requests 'non-2xx' 'socket errors' 'failed total'
printf '|%s|\n' '------------|-------|-----------|----------|---------------|---------------'
for round in $(seq 1 "$ROUNDS"); do
    for proxy in slipstream nginx haproxy ${BASELINE:+slipstream-base}; do
        "$UPSTREAM" 127.0.0.1:$B 2>/dev/null &
        b_pid=$!
        start_proxy $proxy
        p_pid=$P_PID
        sleep 1.5
        wrk -t2 -c50 -d8s "http://127.0.0.1:$PROXY/" > "$WORK/wrk.txt" &
        wrk_pid=$!
        sleep 3
        kill -9 "$b_pid"
        wait "$wrk_pid" || true
        wait "$b_pid" 2>/dev/null || true # (the shell reports the kill)
        kill "$p_pid" 2>/dev/null || true
        wait "$p_pid" 2>/dev/null || true
        sleep 0.5
        reqs=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
        non2xx=$(awk '/Non-2xx/ {print $NF}' "$WORK/wrk.txt")
        sock=$(awk '/Socket errors/ {gsub(",", ""); print $4 + $6 + $8 + $10}' "$WORK/wrk.txt")
        non2xx=${non2xx:-0} sock=${sock:-0}
        printf '| %-10s | %5s | %9s | %8s | %13s | %13s |\n' $proxy "$round" "$reqs" "$non2xx" "$sock" $((non2xx + sock))
    done
done
