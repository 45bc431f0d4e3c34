#!/usr/bin/env bash
# Question: what does serving HTTP/2 clients cost, slipstream (h2 crate, rustls) against nginx
# and HAProxy (Debian's, OpenSSL 3), proxying to an HTTP/1.1 origin, one worker each? And does
# a flooding client cost the proxy bounded CPU and memory?
#
# h2load (nghttp2) -> TLS + HTTP/2 proxy -> nginx origin (plain HTTP/1.1, keep-alive), loopback.
#   (a) h2load -c 10 -m 100 (10 connections, 100 streams each), 1 KB and 91 KB responses,
#       slipstream on its default I/O path (io_uring where the kernel allows it) and on epoll:
#       req/s, p50 and p99 of request times (h2load's per-request log), proxy CPU microseconds
#       per request (schedstat of its threads), proxy syscalls per request (perf stat).
#       Then each proxy's peak resident memory (VmHWM: the 91 KB runs hold 1000 streams in
#       flight).
#   (b) floods (Rapid Reset, PING, CONTINUATION) from one attacker that reconnects whenever it
#       is cut off, for DURATION seconds against each proxy: attacker connections, the proxy's
#       CPU seconds and resident memory right after (peak memory is (a)'s, not the flood's).
#   (c) 2000 idle HTTP/2 TLS connections (one GET each, then idle): memory per connection.
#   (d) an HTTP/2 upstream: h2load as in (a), 1 KB, to slipstream with an h2c upstream and to
#       HAProxy with `proto h2`, both to an nginx origin speaking h2c (prior knowledge).
#   (e) gRPC: ghz unary calls (1 KB answers), 50 concurrent, to the gRPC test server
#       (tests/grpc-server, grpc-go) directly, through slipstream and through HAProxy (h2c both
#       sides): calls/s, mean latency, the proxy's CPU per call.
#
# Usage: bench/h2.sh [seconds per run, default 10]
# BASELINE=/path/to/slipstream adds slipstream-base to (a): another build (before a change) on
# its default I/O path, measured in the same rounds.
# ROUNDS=N (default 2) repeats each cell, alternating the order; SIZES narrows (a) (SIZES=" "
# skips it); FLOODS=0 skips (b); IDLE=0, UPSTREAM=0, GRPC=0 skip (c), (d), (e).
set -euo pipefail
DURATION=${1:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-bench-h2}
ORIGIN=18200 SLIP=18201 NGX=18202 HAP=18203 SLIP_EPOLL=18204 SLIP_BASE=18205
ORIGIN_H2C=18210 SLIP_H2=18211 HAP_H2=18213 GRPC_PORT=18220 SLIP_GRPC=18221 HAP_GRPC=18223

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
command -v h2load >/dev/null 2>&1 || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nghttp2-client >/dev/null
}
(cd "$ROOT" && cargo build --release -q)
GOBIN=$(go env GOPATH 2>/dev/null)/bin
[ -x "$GOBIN/ghz" ] || go install github.com/bojand/ghz/cmd/ghz@v0.93.0

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

{
    nginx_main "$WORK/h2c" 1
    cat <<CONF
http {
    access_log off;
    keepalive_requests 1000000;
    http2_max_concurrent_streams 1000;
    server { listen 127.0.0.1:$ORIGIN_H2C http2; root $WORK/www; }
}
CONF
} > "$WORK/origin-h2c.conf"
mkdir -p "$WORK/h2c"
{
    haproxy_head 1
    cat <<CONF
frontend fe_h2
    bind 127.0.0.1:$HAP_H2 ssl crt $WORK/both.pem alpn h2,http/1.1
    default_backend be_h2
backend be_h2
    http-reuse always
    server origin 127.0.0.1:$ORIGIN_H2C proto h2
frontend fe_grpc
    bind 127.0.0.1:$HAP_GRPC proto h2
    default_backend be_grpc
backend be_grpc
    http-reuse always
    server grpc 127.0.0.1:$GRPC_PORT proto h2
CONF
} > "$WORK/haproxy-h2.cfg"
(cd "$ROOT/tests/grpc-server" && go build -o "$WORK/grpc-server" .)

nginx -c "$WORK/origin.conf" & PIDS+=($!)
nginx -c "$WORK/origin-h2c.conf" & PIDS+=($!)
haproxy -f "$WORK/haproxy-h2.cfg" -db & PIDS+=($!)
"$WORK/grpc-server" -port $GRPC_PORT > /dev/null & PIDS+=($!)
GRPC_PID=$!
"$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLIP_H2 --upstream h2c://127.0.0.1:$ORIGIN_H2C \
    --workers 1 --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" 2>"$WORK/slipstream-h2.log" & PIDS+=($!)
SLIP_H2_PID=$!
"$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLIP_GRPC --upstream h2c://127.0.0.1:$GRPC_PORT \
    --workers 1 2>"$WORK/slipstream-grpc.log" & PIDS+=($!)
SLIP_GRPC_PID=$!
nginx -c "$WORK/nginx.conf" & PIDS+=($!)
haproxy -f "$WORK/haproxy.cfg" -db & PIDS+=($!)
"$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLIP --upstream 127.0.0.1:$ORIGIN \
    --workers 1 --admin 127.0.0.1:18209 --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" 2>"$WORK/slipstream.log" & PIDS+=($!)
SLIP_PID=$!
"$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLIP_EPOLL --upstream 127.0.0.1:$ORIGIN \
    --workers 1 --io epoll --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" 2>"$WORK/slipstream-epoll.log" & PIDS+=($!)
SLIP_EPOLL_PID=$!
SLIP_BASE_PID=none
if [ -n "${BASELINE:-}" ]; then
    "$BASELINE" proxy --listen 127.0.0.1:$SLIP_BASE --upstream 127.0.0.1:$ORIGIN --workers 1 \
        --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" 2>"$WORK/slipstream-base.log" & PIDS+=($!)
    SLIP_BASE_PID=$!
fi
sleep 1

proxy_pids() {
    case $1 in
    "$SLIP") echo "$SLIP_PID" ;;
    "$SLIP_EPOLL") echo "$SLIP_EPOLL_PID" ;;
    "$SLIP_BASE") echo "$SLIP_BASE_PID" ;;
    "$SLIP_H2") echo "$SLIP_H2_PID" ;;
    "$SLIP_GRPC") echo "$SLIP_GRPC_PID" ;;
    "$GRPC_PORT") echo "$GRPC_PID" ;;
    *) listener_pids "$1" ;;
    esac
}

run() { # port path -> "req/s p50us p99us cpu_us_per_req syscalls_per_req user_us sys_us"
    local port=$1 path=$2 pids before after split0 split1
    local url="https://localhost:$port/$path"
    h2load -D 2 -c 10 -m 100 "$url" >/dev/null 2>&1
    pids=$(proxy_pids "$port")
    # shellcheck disable=SC2086
    perf stat -e raw_syscalls:sys_enter -x, -o "$WORK/perf.txt" -p "$(echo $pids | tr ' ' ',')" -- sleep "$DURATION" 2>/dev/null &
    local perf_pid=$!
    # shellcheck disable=SC2086
    before=$(cpu_ns $pids) split0=$(user_sys_ns $pids)
    h2load -D "$DURATION" -c 10 -m 100 --log-file "$WORK/h2load.log" "$url" > "$WORK/h2load.txt" 2>&1
    # shellcheck disable=SC2086
    after=$(cpu_ns $pids) split1=$(user_sys_ns $pids)
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
        -v times="$split0 $split1" \
        'BEGIN { split(times, t, " "); printf "%s %s %s %.1f %.1f %.1f %.1f\n", rps, p50, p99, cpu/1000/n, sys/n, (t[3]-t[1])/1000/n, (t[4]-t[2])/1000/n }'
}

ROUNDS=${ROUNDS:-2}
TARGETS=(slipstream:$SLIP nginx:$NGX haproxy:$HAP)

printf '\nh2load -c 10 -m 100 -D %s over TLS 1.3 (ECDSA P-256) to each proxy, one worker each, HTTP/1.1 to one nginx origin; %s cores; %s rounds alternating\n' \
    "$DURATION" "$(nproc)" "$ROUNDS"
printf 'slipstream: h2 crate, rustls (aws-lc-rs); nginx %s and HAProxy %s: %s\n' \
    "$(nginx -v 2>&1 | sed 's/.*\///')" "$(haproxy -v | head -1 | awk '{print $3}')" "$(openssl version | awk '{print $1, $2}')"
TARGETS=(slipstream:$SLIP slipstream-epoll:$SLIP_EPOLL ${BASELINE:+slipstream-base:$SLIP_BASE} nginx:$NGX haproxy:$HAP)
for size in ${SIZES:-1k 91k}; do
    results_table "(a) $size responses" "$size"
done
TARGETS=(slipstream:$SLIP nginx:$NGX haproxy:$HAP)
if [ -n "${SIZES:-1k 91k}" ]; then
    printf '\npeak resident memory (VmHWM) after (a): '
    for target in "${TARGETS[@]}"; do
        # shellcheck disable=SC2046
        printf '%s %.1f MB; ' "${target%%:*}" "$(status_kb VmHWM $(proxy_pids "${target##*:}") | awk '{print $1/1024}')"
    done
    printf '\n'
fi

if [ "${IDLE:-1}" != 0 ]; then
    printf '\n### (c) 2000 idle HTTP/2 TLS connections, one GET each\n\n'
    for target in "${TARGETS[@]}"; do
        printf '%s: ' "${target%%:*}"
        # Every process of the proxy (nginx: master and worker).
        python3 "$ROOT/bench/connections.py" h2idle "${target##*:}" 2000 \
            "$(proxy_pids "${target##*:}" | tr ' \n' ',,' | sed 's/,*$//')"
    done
fi

if [ "${UPSTREAM:-1}" != 0 ]; then
    TARGETS=(slipstream:$SLIP_H2 haproxy:$HAP_H2)
    results_table "(d) 1k responses from an h2c upstream (nginx origin, HTTP/2 prior knowledge)" 1k
fi

ghz_run() { # port -> "calls/s mean_us cpu_us_per_call"
    local port=$1 pids before after
    local data='{"response_size":1024,"payload":{"body":"aGVsbG8="}}'
    local args=(--insecure --call grpc.testing.TestService/UnaryCall -d "$data" -c 50)
    "$GOBIN/ghz" "${args[@]}" -z 2s "127.0.0.1:$port" >/dev/null 2>&1
    pids=$(proxy_pids "$port")
    # shellcheck disable=SC2086
    before=$(cpu_ns $pids)
    "$GOBIN/ghz" "${args[@]}" -z "${DURATION}s" --format json "127.0.0.1:$port" > "$WORK/ghz.json" 2>/dev/null
    # shellcheck disable=SC2086
    after=$(cpu_ns $pids)
    python3 - "$WORK/ghz.json" $((after - before)) <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ok = r.get("statusCodeDistribution", {}).get("OK", 0)
if ok != r["count"]:
    print(f"warning: {r['count'] - ok} calls failed", file=sys.stderr)
print(f"{r['rps']:.0f} {r['average'] / 1000:.0f} {int(sys.argv[2]) / 1000 / max(r['count'], 1):.1f}")
PY
}

if [ "${GRPC:-1}" != 0 ]; then
    printf '\n### (e) ghz unary calls, 50 concurrent, 1 KB answers, h2c (%s s, %s rounds alternating)\n\n' "$DURATION" "$ROUNDS"
    printf '| %-11s | %9s | %12s | %14s |\n' path 'calls/s' 'mean us' 'CPU us/call'
    printf '|%s|\n' '-------------|-----------|--------------|----------------'
    TARGETS=(direct:$GRPC_PORT slipstream:$SLIP_GRPC haproxy:$HAP_GRPC)
    : > "$WORK/ghz-results"
    for round in $(seq 1 "$ROUNDS"); do
        order=("${TARGETS[@]}")
        [ $((round % 2)) -eq 0 ] && order=("${TARGETS[2]}" "${TARGETS[1]}" "${TARGETS[0]}")
        for target in "${order[@]}"; do
            echo "${target%%:*} $(ghz_run "${target##*:}")" >> "$WORK/ghz-results"
        done
    done
    for target in "${TARGETS[@]}"; do
        awk -v name="${target%%:*}" '$1==name { n++; r+=$2; l+=$3; c+=$4 }
            END { printf "| %-11s | %9.0f | %12.0f | %14.1f |\n", name, r/n, l/n, c/n }' "$WORK/ghz-results"
    done
    printf '(direct: the CPU column is the gRPC server'"'"'s own; through a proxy, the proxy'"'"'s)\n'
fi
TARGETS=(slipstream:$SLIP nginx:$NGX haproxy:$HAP)

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
