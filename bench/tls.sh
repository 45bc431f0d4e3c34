#!/usr/bin/env bash
# Question: what does TLS termination cost, slipstream (rustls, aws-lc-rs) against nginx and
# HAProxy (Debian's, OpenSSL 3), with the same ECDSA P-256 certificate, one worker each?
#
# wrk -> TLS proxy -> nginx origin (plain, keep-alive), all on loopback.
#   (a) a new connection per request (wrk -H 'Connection: close'): handshakes/s and the proxy's
#       CPU per handshake. wrk resumes sessions when the server offers it, so each proxy runs
#       twice: (a1) with resumption off (no tickets, no session cache: every handshake is a
#       full one; a second instance of each) and (a2) with it on (resumed handshakes);
#   (b) keep-alive: req/s at 0 B, 1 KB and 91 KB, with a second slipstream on epoll
#       (`--io epoll`; the first runs the default, io_uring where the kernel allows it).
# Columns: req/s, p50, p99 (wrk --latency), proxy CPU microseconds per request (schedstat of its
# threads), proxy syscalls per request (perf stat -e raw_syscalls:sys_enter).
#
# Usage: bench/tls.sh [seconds per run, default 10] [connections, default 50]
# ROUNDS=N (default 2) repeats each cell, alternating the order; SIZES narrows (b); PARTS=b
# runs (b) alone; WRK_THREADS=N (default 1) sets wrk's threads (issue 36's goals: 2, with 100
# connections).
set -euo pipefail
DURATION=${1:-10}
CONNS=${2:-50}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-bench-tls}
ORIGIN=18100 SLIP=18101 NGX=18102 HAP=18103 SLIP_FULL=18105 NGX_FULL=18106 HAP_FULL=18107
SLIP_EPOLL=18104

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
(cd "$ROOT" && cargo build --release -q)

rm -rf "$WORK" && mkdir -p "$WORK/www"
write_tls_files "$WORK"

write_origin_conf "$WORK/origin.conf" $ORIGIN "$WORK/www"
{
    nginx_main "$WORK" 1
    cat <<CONF
http {
    access_log off;
    keepalive_requests 1000000;
    upstream origin { server 127.0.0.1:$ORIGIN; keepalive 1000; }
    ssl_session_cache shared:SSL:10m;
    # nginx 1.22 offers only up to TLS 1.2 by default; offer what slipstream and HAProxy do.
    ssl_protocols TLSv1.2 TLSv1.3;
    server {
        listen 127.0.0.1:$NGX ssl reuseport;
        ssl_certificate $WORK/cert.pem;
        ssl_certificate_key $WORK/key.pem;
        location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
    server {
        listen 127.0.0.1:$NGX_FULL ssl reuseport;
        ssl_certificate $WORK/cert.pem;
        ssl_certificate_key $WORK/key.pem;
        ssl_session_tickets off;
        ssl_session_cache off;
        location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
}
CONF
} > "$WORK/nginx.conf"
{
    haproxy_head 1
    cat <<CONF
frontend fe
    bind 127.0.0.1:$HAP ssl crt $WORK/both.pem
    default_backend be
backend be
    server origin 127.0.0.1:$ORIGIN maxconn 1000
CONF
} > "$WORK/haproxy.cfg"
{
    haproxy_head 1
    cat <<CONF
global
    tune.ssl.cachesize 0
frontend fe
    bind 127.0.0.1:$HAP_FULL ssl crt $WORK/both.pem no-tls-tickets
    default_backend be
backend be
    server origin 127.0.0.1:$ORIGIN maxconn 1000
CONF
} > "$WORK/haproxy-full.cfg"
cat > "$WORK/slipstream-full.toml" <<CONF
workers = 1
admin = "127.0.0.1:18110"
[tls]
resumption = false
[[listen]]
address = "127.0.0.1:$SLIP_FULL"
tls = true
[upstreams.origin]
servers = ["127.0.0.1:$ORIGIN"]
[[sites]]
default = true
cert = "$WORK/cert.pem"
key = "$WORK/key.pem"
routes = [{ path = "/", upstream = "origin" }]
CONF

nginx -c "$WORK/origin.conf" & PIDS+=($!)
nginx -c "$WORK/nginx.conf" & PIDS+=($!)
haproxy -f "$WORK/haproxy.cfg" -db & PIDS+=($!)
haproxy -f "$WORK/haproxy-full.cfg" -db & PIDS+=($!)
"$ROOT/target/release/slipstream" run --config "$WORK/slipstream-full.toml" 2>"$WORK/slipstream-full.log" & PIDS+=($!)
SLIP_FULL_PID=$!
"$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLIP --upstream 127.0.0.1:$ORIGIN \
    --workers 1 --admin 127.0.0.1:18109 --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" 2>"$WORK/slipstream.log" & PIDS+=($!)
SLIP_PID=$!
"$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLIP_EPOLL --upstream 127.0.0.1:$ORIGIN \
    --workers 1 --io epoll --admin 127.0.0.1:18111 --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" \
    2>"$WORK/slipstream-epoll.log" & PIDS+=($!)
SLIP_EPOLL_PID=$!
sleep 1

proxy_pids() {
    case $1 in
    "$SLIP") echo "$SLIP_PID" ;;
    "$SLIP_FULL") echo "$SLIP_FULL_PID" ;;
    "$SLIP_EPOLL") echo "$SLIP_EPOLL_PID" ;;
    *) listener_pids "$1" ;;
    esac
}

run() { # port path close -> "req/s p50us p99us cpu_us_per_req syscalls_per_req"
    local header=()
    [ "$3" = yes ] && header=(-H 'Connection: close')
    WARMUP=2 wrk_measure "$(proxy_pids "$1")" "https://localhost:$1/$2" "${header[@]}"
}

ROUNDS=${ROUNDS:-2}
RESUMING=(slipstream:$SLIP nginx:$NGX haproxy:$HAP)
FULL=(slipstream:$SLIP_FULL nginx:$NGX_FULL haproxy:$HAP_FULL)
TARGETS=("${RESUMING[@]}")

printf '\nwrk -t%s -c%s -d%ss, TLS to each proxy (ECDSA P-256), one worker each; %s cores; %s rounds alternating\n' \
    "${WRK_THREADS:-1}" "$CONNS" "$DURATION" "$(nproc)" "$ROUNDS"
printf 'slipstream: rustls (aws-lc-rs); nginx %s and HAProxy %s: %s\n' \
    "$(nginx -v 2>&1 | sed 's/.*\///')" "$(haproxy -v | head -1 | awk '{print $3}')" "$(openssl version | awk '{print $1, $2}')"
if [ "${PARTS:-ab}" != b ]; then
    TARGETS=("${FULL[@]}")
    results_table "(a1) a new connection and a full handshake per request (resumption off), 0 B" 0b yes
    TARGETS=("${RESUMING[@]}")
    results_table "(a2) a new connection and a resumed handshake per request, 0 B" 0b yes
fi
TARGETS=(slipstream:$SLIP slipstream-epoll:$SLIP_EPOLL nginx:$NGX haproxy:$HAP)
for size in ${SIZES:-0b 1k 91k}; do
    results_table "(b) keep-alive, $size" "$size" no
done
counter() { curl -s "127.0.0.1:$1/metrics" | awk -v n="$2" '$1==n {print $2}'; }
printf '\nslipstream handshakes: %s full, %s resumed in (a1); %s of %s resumed in (a2) and (b)\n' \
    "$(counter 18110 slipstream_tls_handshakes_total)" "$(counter 18110 slipstream_tls_resumed_total)" \
    "$(counter 18109 slipstream_tls_resumed_total)" "$(counter 18109 slipstream_tls_handshakes_total)"
