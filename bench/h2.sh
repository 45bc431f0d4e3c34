#!/usr/bin/env bash
# Question: what does serving HTTP/2 clients cost, slipstream (h2 crate, rustls) against nginx
# and HAProxy (Debian's, OpenSSL 3), proxying to an HTTP/1.1 origin, one worker each? And does
# a flooding client cost the proxy bounded CPU and memory?
#
# h2load (nghttp2) -> TLS + HTTP/2 proxy -> nginx origin (plain HTTP/1.1, keep-alive), loopback.
#   (a) h2load -c 10 -m 100 (10 connections, 100 streams each), 1 KB and 91 KB responses:
#       req/s, p50 and p99 of request times (h2load's per-request log), proxy CPU microseconds
#       per request (schedstat of its threads), proxy syscalls per request (perf stat).
#   (b) floods (Rapid Reset, PING, CONTINUATION) from one attacker that reconnects whenever it
#       is cut off, for DURATION seconds against each proxy: attacker connections, the proxy's
#       CPU seconds and resident memory right after (peak memory is (a)'s, not the flood's).
#
# Usage: bench/h2.sh [seconds per run, default 10]
# ROUNDS=N (default 2) repeats each cell, alternating the order; SIZES narrows (a) (SIZES=" "
# skips it); FLOODS=0 skips (b).
set -euo pipefail
DURATION=${1:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-bench-h2}
ORIGIN=18200 SLIP=18201 NGX=18202 HAP=18203

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
command -v h2load >/dev/null 2>&1 || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nghttp2-client >/dev/null
}
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
    ssl_protocols TLSv1.2 TLSv1.3;
    server {
        listen 127.0.0.1:$NGX ssl http2 reuseport;
        ssl_certificate $WORK/cert.pem;
        ssl_certificate_key $WORK/key.pem;
        location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
}
CONF
} > "$WORK/nginx.conf"
{
    haproxy_head 1
    cat <<CONF
frontend fe
    bind 127.0.0.1:$HAP ssl crt $WORK/both.pem alpn h2,http/1.1
    default_backend be
backend be
    http-reuse always
    server origin 127.0.0.1:$ORIGIN maxconn 1000
CONF
} > "$WORK/haproxy.cfg"

nginx -c "$WORK/origin.conf" & PIDS+=($!)
nginx -c "$WORK/nginx.conf" & PIDS+=($!)
haproxy -f "$WORK/haproxy.cfg" -db & PIDS+=($!)
"$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLIP --upstream 127.0.0.1:$ORIGIN \
    --workers 1 --admin 127.0.0.1:18209 --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" 2>"$WORK/slipstream.log" & PIDS+=($!)
SLIP_PID=$!
sleep 1

proxy_pids() {
    case $1 in
    "$SLIP") echo "$SLIP_PID" ;;
    *) listener_pids "$1" ;;
    esac
}

run() { # port path -> "req/s p50us p99us cpu_us_per_req syscalls_per_req"
    local port=$1 path=$2 pids before after
    local url="https://localhost:$port/$path"
    h2load -D 2 -c 10 -m 100 "$url" >/dev/null 2>&1
    pids=$(proxy_pids "$port")
    # shellcheck disable=SC2086
    perf stat -e raw_syscalls:sys_enter -x, -o "$WORK/perf.txt" -p "$(echo $pids | tr ' ' ',')" -- sleep "$DURATION" 2>/dev/null &
    local perf_pid=$!
    # shellcheck disable=SC2086
    before=$(cpu_ns $pids)
    h2load -D "$DURATION" -c 10 -m 100 --log-file "$WORK/h2load.log" "$url" > "$WORK/h2load.txt" 2>&1
    # shellcheck disable=SC2086
    after=$(cpu_ns $pids)
    wait "$perf_pid" || true
    local rps reqs failed p50 p99 sys
    rps=$(awk '/^finished in/ {print $4}' "$WORK/h2load.txt")
    reqs=$(awk '/^requests:/ {print $8}' "$WORK/h2load.txt")
    failed=$(awk '/^requests:/ {print $10}' "$WORK/h2load.txt")
    [ "${failed:-0}" = 0 ] || echo "warning: $failed failed requests on port $port" >&2
    read -r p50 p99 < <(cut -f3 "$WORK/h2load.log" | sort -n |
        awk '{v[NR]=$1} END {print v[int(NR*0.5)], v[int(NR*0.99)]}')
    sys=$(awk -F, '/raw_syscalls:sys_enter/ {print $1}' "$WORK/perf.txt")
    awk -v rps="$rps" -v p50="$p50" -v p99="$p99" -v cpu=$((after - before)) -v n="$reqs" -v sys="${sys:-0}" \
        'BEGIN { printf "%s %s %s %.1f %.1f\n", rps, p50, p99, cpu/1000/n, sys/n }'
}

ROUNDS=${ROUNDS:-2}
TARGETS=(slipstream:$SLIP nginx:$NGX haproxy:$HAP)

printf '\nh2load -c 10 -m 100 -D %s over TLS 1.3 (ECDSA P-256) to each proxy, one worker each, HTTP/1.1 to one nginx origin; %s cores; %s rounds alternating\n' \
    "$DURATION" "$(nproc)" "$ROUNDS"
printf 'slipstream: h2 crate, rustls (aws-lc-rs); nginx %s and HAProxy %s: %s\n' \
    "$(nginx -v 2>&1 | sed 's/.*\///')" "$(haproxy -v | head -1 | awk '{print $3}')" "$(openssl version | awk '{print $1, $2}')"
for size in ${SIZES:-1k 91k}; do
    results_table "(a) $size responses" "$size"
done

[ "${FLOODS:-1}" = 0 ] && exit 0
printf '\n### (b) floods, %s s each, one attacker reconnecting whenever it is cut off\n\n' "$DURATION"
printf '| %-11s | %-13s | %12s | %12s | %13s |\n' proxy attack connections 'CPU seconds' 'RSS MB after'
printf '|%s|\n' '-------------|---------------|--------------|--------------|---------------'
for attack in rapid-reset ping continuation; do
    for target in "${TARGETS[@]}"; do
        port=${target##*:}
        pids=$(proxy_pids "$port")
        # shellcheck disable=SC2086
        before=$(cpu_ns $pids)
        conns=$(python3 "$ROOT/bench/h2flood.py" "$attack" "$port" "$DURATION")
        # shellcheck disable=SC2086
        after=$(cpu_ns $pids)
        # shellcheck disable=SC2086
        rss=$(status_kb VmRSS $pids)
        printf '| %-11s | %-13s | %12s | %12.2f | %13.1f |\n' "${target%%:*}" "$attack" "$conns" \
            "$(echo "$after $before" | awk '{print ($1-$2)/1e9}')" "$(echo "$rss" | awk '{print $1/1024}')"
    done
done
printf '\nslipstream: %s floods answered GOAWAY(ENHANCE_YOUR_CALM)\n' \
    "$(curl -s 127.0.0.1:18209/metrics | awk '$1=="slipstream_http2_floods_total" {print $2}')"
