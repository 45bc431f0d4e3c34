#!/usr/bin/env bash
# Question: how fast does each server serve static files, by the field report's sizes?
#
# wrk -> server, on loopback, one worker each (2 cores: wrk gets the other). Servers:
#   slipstream      `slipstream serve --workers 1 --access-log F` (its defaults; the log is
#                   on, because nginx's is)
#   nginx           sendfile on, tcp_nopush on, buffered access log, open_file_cache off
#                   (nginx's default)
#   nginx-ofc       the same with open_file_cache max=1000 inactive=20s
#   caddy           `caddy file-server`, GOMAXPROCS=1 (when caddy is installed)
#   slipstream-base with BASELINE=/path/to/slipstream: another build, same rounds
# Files: 0 B, 1232 B, 2590 B, 10 KB, 100 KB (field report 002) and 10 MB.
# Columns: req/s, p50, p99 (wrk --latency), server CPU microseconds per request (schedstat of
# the server's threads), syscalls per request (perf stat -e raw_syscalls:sys_enter), and for
# 10 MB the server's CPU milliseconds per GB sent.
#
# Usage: bench/static.sh [seconds per run, default 10] [connections, default 50]
# SIZES="10k 100k" or SERVERS="slipstream nginx" narrow the run; ROUNDS=N (default 2) repeats
# each cell, alternating the order of the servers, and prints means.
# Installs nginx, wrk, perf and caddy with apt-get when missing (needs root).
set -euo pipefail
DURATION=${1:-10}
CONNS=${2:-50}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-static-bench}
SLIP=18101 NGX=18102 NGX_OFC=18103 CADDY=18104 SLIP_BASE=18105

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
command -v caddy >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq caddy >/dev/null 2>&1 || true
(cd "$ROOT" && cargo build --release -q)

rm -rf "$WORK" && mkdir -p "$WORK/www" "$WORK/logs"
: > "$WORK/www/0b"
for spec in 1232b:1232 2590b:2590 10k:10240 100k:102400 10m:10485760; do
    head -c "${spec#*:}" /dev/urandom > "$WORK/www/${spec%%:*}"
done

write_nginx() { # file port extra
    cat > "$1" <<CONF
worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
pid $1.pid;
error_log $1.error.log;
events { worker_connections 4096; }
http {
    include /etc/nginx/mime.types;
    log_format main '\$remote_addr - \$remote_user [\$time_local] "\$request" '
                    '\$status \$body_bytes_sent "\$http_referer" '
                    '"\$http_user_agent" "\$http_x_forwarded_for"';
    access_log $WORK/logs/nginx-$2.log main buffer=64k flush=1s;
    keepalive_requests 1000000;
    sendfile on;
    tcp_nopush on;
    $3
    server { listen 127.0.0.1:$2 reuseport backlog=4096; root $WORK/www; }
}
CONF
}
write_nginx "$WORK/nginx.conf" $NGX ""
write_nginx "$WORK/nginx-ofc.conf" $NGX_OFC "open_file_cache max=1000 inactive=20s;"

nginx -c "$WORK/nginx.conf" & PIDS+=($!)
nginx -c "$WORK/nginx-ofc.conf" & PIDS+=($!)
"$ROOT/target/release/slipstream" serve --listen 127.0.0.1:$SLIP --root "$WORK/www" --workers 1 \
    --access-log "$WORK/logs/slipstream.log" 2>"$WORK/logs/slipstream.err" & PIDS+=($!)
SLIP_PID=$!
SLIP_BASE_PID=none
if [ -n "${BASELINE:-}" ]; then
    "$BASELINE" serve --listen 127.0.0.1:$SLIP_BASE --root "$WORK/www" --workers 1 \
        --access-log "$WORK/logs/slipstream-base.log" 2>"$WORK/logs/slipstream-base.err" & PIDS+=($!)
    SLIP_BASE_PID=$!
fi
HAVE_CADDY=""
if command -v caddy >/dev/null 2>&1; then
    GOMAXPROCS=1 caddy file-server --listen 127.0.0.1:$CADDY --root "$WORK/www" >"$WORK/logs/caddy.log" 2>&1 & PIDS+=($!)
    CADDY_PID=$!
    HAVE_CADDY=caddy
fi
sleep 1

server_pids() {
    case $1 in
        $SLIP) echo "$SLIP_PID" ;;
        $SLIP_BASE) echo "$SLIP_BASE_PID" ;;
        $CADDY) echo "$CADDY_PID" ;;
        *) listener_pids "$1" ;;
    esac
}

run() { # port file bytes -> "req/s p50us p99us cpu_us_per_req syscalls_per_req cpu_ms_per_gb"
    WARMUP=2 wrk_measure "$(server_pids "$1")" "http://127.0.0.1:$1/$2" |
        awk -v bytes="$3" '{ printf "%s %s\n", $0, (bytes > 0 ? sprintf("%.0f", $4 * 1e6 / bytes) : "-") }'
}

ROUNDS=${ROUNDS:-2}
TARGETS=(slipstream:$SLIP slipstream-base:$SLIP_BASE nginx:$NGX nginx-ofc:$NGX_OFC caddy:$CADDY)
DEFAULT_SERVERS="slipstream ${BASELINE:+slipstream-base} nginx nginx-ofc $HAVE_CADDY"
selected() { case " ${SERVERS:-$DEFAULT_SERVERS} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

printf '\nwrk -t1 -c%s -d%ss per cell; one worker per server; %s cores; %s rounds, alternating order\n' \
    "$CONNS" "$DURATION" "$(nproc)" "$ROUNDS"
for size in ${SIZES:-0b 1232b 2590b 10k 100k 10m}; do
    bytes=$(stat -c %s "$WORK/www/$size")
    printf '\n### %s\n\n' "$size"
    printf '| %-15s | %9s | %8s | %8s | %8s | %10s | %12s | %9s |\n' server 'req/s' 'vs nginx' 'p50 us' 'p99 us' 'CPU us/req' 'syscalls/req' 'CPU ms/GB'
    printf '|%s|\n' '-----------------|-----------|----------|----------|----------|------------|--------------|-----------'
    : > "$WORK/results"
    for round in $(seq 1 "$ROUNDS"); do
        order=("${TARGETS[@]}")
        if [ $((round % 2)) -eq 0 ]; then
            order=(); for ((i = ${#TARGETS[@]} - 1; i >= 0; i--)); do order+=("${TARGETS[$i]}"); done
        fi
        for target in "${order[@]}"; do
            name=${target%%:*} port=${target##*:}
            selected "$name" || continue
            echo "$name $(run "$port" "$size" "$bytes")" >> "$WORK/results"
        done
    done
    base=$(awk '$1=="nginx" {s+=$2; n++} END {print (n ? s/n : 0)}' "$WORK/results")
    for target in "${TARGETS[@]}"; do
        name=${target%%:*}
        selected "$name" || continue
        awk -v name="$name" -v base="$base" '
            $1==name { n++; rps+=$2; p50+=$3; p99+=$4; cpu+=$5; sys+=$6; if ($7 != "-") gb+=$7 }
            END {
                g = (gb > 0) ? sprintf("%.0f", gb/n) : "-"
                printf "| %-15s | %9.0f | %8.2f | %8.0f | %8.0f | %10.1f | %12.1f | %9s |\n", name, rps/n, (base ? rps/n/base : 0), p50/n, p99/n, cpu/n, sys/n, g
            }' "$WORK/results"
    done
done
