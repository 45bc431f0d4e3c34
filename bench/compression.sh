#!/usr/bin/env bash
# Question: what does compressing on the fly cost each server, per algorithm and level, for
# proxied responses and for static files?
#
# wrk -> server (-> nginx origin, for proxied responses), on loopback, one worker each. Bodies:
# 10 KB and 100 KB of HTML (a license text marked up) and of JSON (generated records). Each
# server has `/p/` (proxied to the origin, which does not compress) and `/s/` (static files).
# Rows (the client's Accept-Encoding picks the coding):
#   slipstream gzip-1 / br-3 / zstd-3   `compress = true`, its defaults (gzip 1, brotli 3, zstd 3)
#   slipstream gzip-2, gzip-6           more instances with gzip_level = 2 and 6 (zlib-rs level 1
#                                       is its quick strategy: larger output than zlib's level 1;
#                                       its level 2 matches zlib's level 1 in size)
#   nginx gzip-1, nginx gzip-6          `gzip on; gzip_comp_level N; gzip_types ...` (zlib)
#   haproxy gzip                        `compression algo gzip` (libslz; no level), proxy only
#   caddy gzip-1, caddy gzip-6, caddy zstd   `encode { gzip N }` / `encode zstd`
#   slipstream identity, nginx identity     no Accept-Encoding: the uncompressed rate
# Columns: req/s, p50, p99, server CPU microseconds per request (schedstat of the server's
# threads; for proxied rows the origin's CPU is not counted), syscalls per request, and the
# compressed body size (curl with the same Accept-Encoding).
#
# Usage: bench/compression.sh [seconds per run, default 5] [connections, default 50]
# BODIES="html10k json100k", MODES="p s" or ROWS="slipstream-gzip-1 nginx-gzip-1" narrow the
# run; ROUNDS=N (default 2) repeats each cell, alternating the order of the rows.
# Installs nginx, haproxy, wrk, perf and caddy with apt-get when missing (needs root).
set -euo pipefail
DURATION=${1:-5}
CONNS=${2:-50}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-compression-bench}
ORIGIN=18200 SLIP=18201 SLIP6=18202 SLIP2=18208 NGX1=18203 NGX6=18204 HAP=18205 CADDY1=18206 CADDY6=18207

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
command -v caddy >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq caddy >/dev/null 2>&1 || true
(cd "$ROOT" && cargo build --release -q)

rm -rf "$WORK" && mkdir -p "$WORK/www/p" "$WORK/www/s" "$WORK/logs"

# The bodies: HTML from a license text (paragraphs, links), JSON from generated records.
make_html() { # bytes
    {
        echo '<!doctype html><html><head><meta charset="utf-8"><title>Licenses</title></head><body>'
        while :; do
            for f in /usr/share/common-licenses/*; do
                [ -f "$f" ] || continue
                sed -e 's/&/\&amp;/g; s/</\&lt;/g' -e 's/^$/<\/p><p class="para">/' "$f"
                echo "<a href=\"/licenses/$(basename "$f")\">$(basename "$f")</a>"
            done
        done
    } | head -c "$1" || true
}
make_json() { # bytes
    python3 -c '
import json, random, sys
random.seed(7)
words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
out, i = [], 0
while len(json.dumps(out)) < int(sys.argv[1]):
    out.append({"id": i, "name": " ".join(random.choice(words) for _ in range(3)),
                "price": round(random.uniform(1, 500), 2), "tags": random.sample(words, 3),
                "active": i % 3 != 0, "created": "2026-11-%02dT10:%02d:00Z" % (1 + i % 28, i % 60)})
    i += 1
sys.stdout.write(json.dumps(out)[: int(sys.argv[1])])' "$1"
}
for dir in p s; do
    make_html 10240 > "$WORK/www/$dir/html10k.html"
    make_html 102400 > "$WORK/www/$dir/html100k.html"
    make_json 10240 > "$WORK/www/$dir/json10k.json"
    make_json 102400 > "$WORK/www/$dir/json100k.json"
done

TYPES="text/html application/json"
# The origin: plain nginx serving the bodies, no compression.
write_origin_conf "$WORK/origin.conf" $ORIGIN "$WORK/www"
sed -i 's|http {|http {\n    include /etc/nginx/mime.types;|' "$WORK/origin.conf"

write_slipstream() { # file port gzip-level
    cat > "$1" <<CONF
workers = 1
[compression]
gzip_level = $3
[[listen]]
address = "127.0.0.1:$2"
[upstreams.origin]
servers = ["127.0.0.1:$ORIGIN"]
[[sites]]
default = true
routes = [
  { path = "/p/", upstream = "origin", compress = true },
  { path = "/s/", alias = "$WORK/www/s/", compress = true },
]
CONF
}
write_nginx() { # file port level
    cat > "$1" <<CONF
$(nginx_main "$WORK" 1 | sed "s|$WORK/nginx|$1|")
http {
    include /etc/nginx/mime.types;
    access_log off;
    keepalive_requests 1000000;
    sendfile on;
    gzip on;
    gzip_comp_level $3;
    gzip_types application/json; # text/html is always included
    gzip_vary on;
    gzip_proxied any;
    upstream origin { server 127.0.0.1:$ORIGIN; keepalive 100; }
    server {
        listen 127.0.0.1:$2 reuseport;
        location /p/ {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
        location /s/ { root $WORK/www; }
    }
}
CONF
}
write_caddy() { # file port encode-block
    cat > "$1" <<CONF
{
    admin off
    auto_https off
}
http://127.0.0.1:$2 {
    encode {
        $3
    }
    handle /p/* {
        reverse_proxy 127.0.0.1:$ORIGIN
    }
    handle /s/* {
        root * $WORK/www
        file_server
    }
}
CONF
}
write_slipstream "$WORK/slip1.toml" $SLIP 1
write_slipstream "$WORK/slip6.toml" $SLIP6 6
write_slipstream "$WORK/slip2.toml" $SLIP2 2
write_nginx "$WORK/nginx1.conf" $NGX1 1
write_nginx "$WORK/nginx6.conf" $NGX6 6
{
    haproxy_head 1 "option http-keep-alive" "http-reuse always"
    printf 'frontend fe\n    bind 127.0.0.1:%s\n    compression algo gzip\n    compression type %s\n    default_backend be\n' $HAP "$TYPES"
    printf 'backend be\n    server origin 127.0.0.1:%s\n' $ORIGIN
} > "$WORK/haproxy.cfg"

nginx -c "$WORK/origin.conf" & PIDS+=($!)
nginx -c "$WORK/nginx1.conf" & PIDS+=($!)
nginx -c "$WORK/nginx6.conf" & PIDS+=($!)
haproxy -f "$WORK/haproxy.cfg" >"$WORK/logs/haproxy.log" 2>&1 & PIDS+=($!)
HAP_PID=$!
"$ROOT/target/release/slipstream" run --config "$WORK/slip1.toml" 2>"$WORK/logs/slip1.err" & PIDS+=($!)
SLIP_PID=$!
"$ROOT/target/release/slipstream" run --config "$WORK/slip6.toml" 2>"$WORK/logs/slip6.err" & PIDS+=($!)
SLIP6_PID=$!
"$ROOT/target/release/slipstream" run --config "$WORK/slip2.toml" 2>"$WORK/logs/slip2.err" & PIDS+=($!)
SLIP2_PID=$!
HAVE_CADDY=""
if command -v caddy >/dev/null 2>&1; then
    write_caddy "$WORK/Caddyfile1" $CADDY1 "gzip 1
        zstd"
    write_caddy "$WORK/Caddyfile6" $CADDY6 "gzip 6"
    GOMAXPROCS=1 caddy run --adapter caddyfile --config "$WORK/Caddyfile1" >"$WORK/logs/caddy1.log" 2>&1 & PIDS+=($!)
    CADDY1_PID=$!
    GOMAXPROCS=1 caddy run --adapter caddyfile --config "$WORK/Caddyfile6" >"$WORK/logs/caddy6.log" 2>&1 & PIDS+=($!)
    CADDY6_PID=$!
    HAVE_CADDY=1
fi
sleep 1

# Each row: name, port, Accept-Encoding ("-" for none), whether it serves static files.
ALL_ROWS=(
    "slipstream-identity $SLIP - s"
    "slipstream-gzip-1 $SLIP gzip s"
    "slipstream-gzip-2 $SLIP2 gzip s"
    "slipstream-gzip-6 $SLIP6 gzip s"
    "slipstream-br-3 $SLIP br s"
    "slipstream-zstd-3 $SLIP zstd s"
    "nginx-identity $NGX1 - s"
    "nginx-gzip-1 $NGX1 gzip s"
    "nginx-gzip-6 $NGX6 gzip s"
    "haproxy-gzip $HAP gzip -"
)
if [ -n "$HAVE_CADDY" ]; then
    ALL_ROWS+=("caddy-gzip-1 $CADDY1 gzip s" "caddy-gzip-6 $CADDY6 gzip s" "caddy-zstd $CADDY1 zstd s")
fi
selected() { [ -z "${ROWS:-}" ] && return 0; case " $ROWS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

server_pids() {
    case $1 in
        $SLIP) echo "$SLIP_PID" ;;
        $SLIP6) echo "$SLIP6_PID" ;;
        $SLIP2) echo "$SLIP2_PID" ;;
        $HAP) echo "$HAP_PID" ;;
        $CADDY1) echo "${CADDY1_PID:-}" ;;
        $CADDY6) echo "${CADDY6_PID:-}" ;;
        *) listener_pids "$1" ;;
    esac
}

run() { # port url-path accept-encoding -> "req/s p50us p99us cpu_us_per_req syscalls_per_req"
    local header=()
    [ "$3" != - ] && header=(-H "Accept-Encoding: $3")
    wrk_measure "$(server_pids "$1")" "http://127.0.0.1:$1$2" "${header[@]}"
}

size_of() { # port path accept-encoding
    local header=()
    [ "$3" != - ] && header=(-H "Accept-Encoding: $3")
    curl -s "${header[@]}" "http://127.0.0.1:$1$2" | wc -c
}

ROUNDS=${ROUNDS:-2}
printf '\nwrk -t1 -c%s -d%ss per cell; one worker per server; %s cores; %s rounds, alternating order\n' \
    "$CONNS" "$DURATION" "$(nproc)" "$ROUNDS"
for mode in ${MODES:-p s}; do
    for body in ${BODIES:-html10k json10k html100k json100k}; do
        ext=html
        case $body in json*) ext=json ;; esac
        path="/$mode/$body.$ext"
        label=proxied
        [ "$mode" = s ] && label=static
        printf '\n### %s %s (%s bytes)\n\n' "$label" "$body" "$(stat -c %s "$WORK/www/$mode/$body.$ext")"
        printf '| %-19s | %9s | %8s | %8s | %10s | %12s | %10s |\n' row 'req/s' 'p50 us' 'p99 us' 'CPU us/req' 'syscalls/req' 'body bytes'
        printf '|%s|\n' '---------------------|-----------|----------|----------|------------|--------------|------------'
        rows=()
        for r in "${ALL_ROWS[@]}"; do
            set -- $r
            selected "$1" || continue
            [ "$mode" = s ] && [ "$4" = - ] && continue
            rows+=("$r")
        done
        : > "$WORK/results"
        for round in $(seq 1 "$ROUNDS"); do
            order=("${rows[@]}")
            if [ $((round % 2)) -eq 0 ]; then
                order=(); for ((i = ${#rows[@]} - 1; i >= 0; i--)); do order+=("${rows[$i]}"); done
            fi
            for r in "${order[@]}"; do
                set -- $r
                echo "$1 $(run "$2" "$path" "$3")" >> "$WORK/results"
            done
        done
        for r in "${rows[@]}"; do
            set -- $r
            size=$(size_of "$2" "$path" "$3")
            awk -v name="$1" -v size="$size" '$1==name { n++; r+=$2; a+=$3; b+=$4; c+=$5; s+=$6 }
                END { printf "| %-19s | %9.0f | %8.0f | %8.0f | %10.1f | %12.1f | %10s |\n", name, r/n, a/n, b/n, c/n, s/n, size }' "$WORK/results"
        done
    done
done
