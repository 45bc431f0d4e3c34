#!/usr/bin/env bash
# Question: what do large downloads cost a proxy in disk writes, memory and CPU?
#
# curl clients -> proxy -> nginx origin serving a 100 MB file (sendfile), all on loopback, one
# worker per proxy. Proxies: slipstream defaults (io_uring, splice waiting on the ring),
# slipstream-epoll (--io epoll, splice waiting on epoll), slipstream with zero_copy = false,
# nginx with default proxy settings (proxy_buffering on: temp files), nginx proxy_buffering off.
#
# Slow run: N clients at once, each limited to RATE; columns: downloads completed, proxy bytes
# written to storage (/proc/PID/io write_bytes), peak RSS (VmHWM, summed over the proxy's
# processes, measured fresh per proxy), proxy CPU seconds.
# Fast run: 4 clients at once, unlimited, ROUNDS times per proxy, the proxies in a rotated order
# each round (all running at once); CPU seconds per GB proxied.
#
# Usage: bench/download.sh [clients, default 20] [rate, default 20M] [rounds, default 5]
set -euo pipefail
CLIENTS=${1:-20}
RATE=${2:-20M}
ROUNDS=${3:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-download}
ORIGIN=18100 SLIP=18101 SLIP_COPY=18102 NGX_DEF=18103 NGX_OFF=18104 SLIP_EPOLL=18105
SIZE=$((100 * 1024 * 1024))

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
(cd "$ROOT" && cargo build --release -q)

rm -rf "$WORK" && mkdir -p "$WORK/www" "$WORK/logs" "$WORK/tmp"
head -c "$SIZE" /dev/urandom > "$WORK/www/big"

write_origin_conf "$WORK/origin.conf" $ORIGIN "$WORK/www"
write_proxy_conf "$WORK/nginx-default.conf" $NGX_DEF $ORIGIN \
    "access_log off; proxy_temp_path $WORK/tmp/nginx-default;" ""
write_proxy_conf "$WORK/nginx-buffering-off.conf" $NGX_OFF $ORIGIN \
    "access_log off; proxy_temp_path $WORK/tmp/nginx-buffering-off;" "proxy_buffering off;"
cat > "$WORK/slip-copy.toml" <<EOF
workers = 1
[limits]
zero_copy = false
[[listen]]
address = "127.0.0.1:$SLIP_COPY"
[upstreams.origin]
servers = ["127.0.0.1:$ORIGIN"]
[[sites]]
default = true
routes = [{ path = "/", upstream = "origin" }]
EOF
nginx -c "$WORK/origin.conf" & PIDS+=($!)
sleep 0.5

start_proxy() { # name -> starts it fresh, prints nothing
    case $1 in
        slipstream) "$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLIP --upstream 127.0.0.1:$ORIGIN --workers 1 2>"$WORK/logs/slip.log" & ;;
        slipstream-epoll) "$ROOT/target/release/slipstream" proxy --listen 127.0.0.1:$SLIP_EPOLL --upstream 127.0.0.1:$ORIGIN --workers 1 --io epoll 2>"$WORK/logs/slip-epoll.log" & ;;
        slipstream-copy) "$ROOT/target/release/slipstream" run --config "$WORK/slip-copy.toml" 2>"$WORK/logs/slip-copy.log" & ;;
        nginx-default) nginx -c "$WORK/nginx-default.conf" & ;;
        nginx-buffering-off) nginx -c "$WORK/nginx-buffering-off.conf" & ;;
    esac
    PROXY_PID=$!
    sleep 0.7
}
port_of() {
    case $1 in
        slipstream) echo $SLIP ;; slipstream-epoll) echo $SLIP_EPOLL ;; slipstream-copy) echo $SLIP_COPY ;;
        nginx-default) echo $NGX_DEF ;; nginx-buffering-off) echo $NGX_OFF ;;
    esac
}

# N concurrent downloads; prints how many completed with the full size.
downloads() { # port clients rate(or "") -> completed
    local port=$1 n=$2 rate=$3 i ok=0 limit=()
    [ -n "$rate" ] && limit=(--limit-rate "$rate")
    for i in $(seq 1 "$n"); do
        curl -s "${limit[@]}" -o /dev/null -w '%{size_download}\n' "http://127.0.0.1:$port/big" > "$WORK/dl.$i" &
    done
    wait_clients
    for i in $(seq 1 "$n"); do
        [ "$(cat "$WORK/dl.$i")" = "$SIZE" ] && ok=$((ok + 1))
    done
    echo "$ok"
}
wait_clients() { while pgrep -f "curl -s.*127.0.0.1" >/dev/null; do sleep 0.2; done; }

printf '\n### %s clients each downloading 100 MB at %s/s\n\n' "$CLIENTS" "$RATE"
printf '| %-20s | %9s | %14s | %12s | %11s |\n' proxy completed 'disk written' 'peak RSS MB' 'CPU seconds'
printf '|%s|\n' '----------------------|-----------|----------------|--------------|-------------'
for name in slipstream slipstream-epoll slipstream-copy nginx-default nginx-buffering-off; do
    start_proxy "$name"
    port=$(port_of "$name")
    pids=$(listener_pids "$port")
    # shellcheck disable=SC2086
    disk0=$(disk_write_bytes $pids); cpu0=$(cpu_ns $pids)
    done_n=$(downloads "$port" "$CLIENTS" "$RATE")
    # shellcheck disable=SC2086
    disk1=$(disk_write_bytes $pids); cpu1=$(cpu_ns $pids); peak=$(status_kb VmHWM $pids)
    printf '| %-20s | %6s/%-2s | %14s | %12.1f | %11.2f |\n' "$name" "$done_n" "$CLIENTS" "$((disk1 - disk0))" \
        "$(awk -v k="$peak" 'BEGIN {print k/1024}')" "$(awk -v n=$((cpu1 - cpu0)) 'BEGIN {print n/1e9}')"
    # shellcheck disable=SC2086
    kill $pids 2>/dev/null || true
    sleep 0.5
done

printf '\n### 4 fast clients x %s rounds of 100 MB each (%s GB per proxy), the proxies in alternating order\n\n' "$ROUNDS" "$(awk -v r="$ROUNDS" 'BEGIN {printf "%.1f", 4*r*100/1024}')"
# Every proxy runs at once and each round visits them in a rotated order, so a slow spell of this
# machine falls on all of them alike. CPU is summed per proxy over its rounds.
NAMES=(slipstream slipstream-epoll slipstream-copy nginx-default nginx-buffering-off)
declare -A FAST_PIDS FAST_CPU
for name in "${NAMES[@]}"; do
    start_proxy "$name"
    FAST_PIDS[$name]=$(listener_pids "$(port_of "$name")")
    FAST_CPU[$name]=0
done
for round in $(seq 1 "$ROUNDS"); do
    for i in "${!NAMES[@]}"; do
        name=${NAMES[$(((i + round) % ${#NAMES[@]}))]}
        # shellcheck disable=SC2086
        cpu0=$(cpu_ns ${FAST_PIDS[$name]})
        downloads "$(port_of "$name")" 4 "" >/dev/null
        # shellcheck disable=SC2086
        cpu1=$(cpu_ns ${FAST_PIDS[$name]})
        FAST_CPU[$name]=$((FAST_CPU[$name] + cpu1 - cpu0))
    done
done
printf '| %-20s | %11s | %10s |\n' proxy 'CPU seconds' 'CPU s/GB'
printf '|%s|\n' '----------------------|-------------|-----------'
for name in "${NAMES[@]}"; do
    awk -v n="${FAST_CPU[$name]}" -v r="$ROUNDS" -v name="$name" \
        'BEGIN { s = n/1e9; gb = 4*r*100/1024; printf "| %-20s | %11.2f | %10.3f |\n", name, s, s/gb }'
    # shellcheck disable=SC2086
    kill ${FAST_PIDS[$name]} 2>/dev/null || true
done
