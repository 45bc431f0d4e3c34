#!/usr/bin/env bash
# Question: what does a cache HIT cost in slipstream's memory tier, next to nginx proxy_cache and
# Varnish? Targets: slipstream >= 1.3x nginx's req/s, and <= Varnish's CPU per hit.
#
# wrk -t1 -cN -> cache -> nginx origin (static 1 KB and 91 KB files sent with
# `Cache-Control: max-age=3600`), all on loopback. Every measured request is a hit: each cache is
# warmed and its answer checked before measuring (slipstream's `Cache-Status: ...; hit`, nginx's
# `X-Cache-Status: HIT`, Varnish's `X-Varnish` with two ids), and the origin logs every request it
# gets (unbuffered): a run during which it got one fails the script. Caches:
#   slipstream  `slipstream run`: workers = 1, [cache_zones.main] memory = "256m",
#               max_object = "8m", the site's `cache = { zone = "main" }`; access log off (its default)
#               (the memory tier: bodies from 128 KB on in memory files, sent with sendfile)
#   slip-disk   the same with a disk tier on tmpfs (/dev/shm, as nginx's) and max_object = "512":
#               every object is stored in a file only, so every hit opens its file and sends it
#               with sendfile, as nginx does
#   nginx       Debian nginx, one worker, proxy_cache_path on tmpfs (/dev/shm) with
#               keys_zone=main:10m, proxy_cache_valid 200 10m, upstream keepalive, sendfile on,
#               access_log off
#   nginx-ofc   the same with open_file_cache (without it nginx opens the cache file per hit)
#   varnish     Debian varnishd 7.1, -s malloc,256m, a VCL with only the origin as backend (the
#               built-in VCL does the rest), one thread pool of CONNS+10 to 500 threads (Varnish
#               gives each busy connection a thread; it cannot run on one); its shared-memory log
#               is always written (no varnishncsa reads it)
# "One worker each": every cache is pinned to CPU 1 with taskset (all of Varnish's threads share
# it), and wrk, the origin and this script to CPU 0. PIN=0 turns pinning off.
# Columns: req/s, p50, p99 (wrk --latency), the cache's CPU microseconds per request
# (utime+stime of its processes from /proc/PID/stat, so exited threads count), syscalls per
# request (perf stat -e raw_syscalls:sys_enter, the threads present at the start), "queued %":
# the share of the run its threads waited for a CPU (schedstat; with pinning, for a one-thread
# cache that is other processes on its core: the noise; for Varnish also its own threads), and
# the ratios the targets are about.
#
# CLIENT=lean measures with examples/bench_client instead of wrk: it discards each body in the
# kernel (recv with MSG_TRUNC) where wrk copies it, so at 91 KB the caches, not the client, are
# the limit (wrk saturates its core at about 35k req/s of 91 KB here, whatever the cache).
#
# Usage: bench/cache.sh [seconds per run, default 10] [connections, default 50]
# ROUNDS=N (default 3) alternates the order of the caches; SIZES="1k" (or another size in KiB
# written Nk, such as "256k", made for the run) or SERVERS="slipstream
# varnish" narrow the run; BIN=/path/to/slipstream skips the build (else `cargo build --release`,
# honouring CARGO_TARGET_DIR). PROFILE=1k (or 91k) ends with a `perf record -e cpu-clock`
# (dwarf call graphs) of slipstream serving those hits, and its top symbols.
# Installs nginx, wrk, perf and varnish with apt-get when missing (needs root).
set -euo pipefail
DURATION=${1:-10}
CONNS=${2:-50}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-cache-bench}
SHM=/dev/shm/$(basename "$WORK")  # nginx keeps its cache in files: on tmpfs here
ORIGIN=18600 SLIP=18601 NGX=18602 NGX_OFC=18603 VARNISH=18604 SLIP_DISK=18605

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
command -v varnishd >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq varnish >/dev/null
if [ -z "${BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release -q)
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/slipstream
fi
if [ "${CLIENT:-wrk}" = lean ]; then
    (cd "$ROOT" && cargo build --release -q --example bench_client)
    export WRK=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/bench_client
fi
CORES=$(nproc)
ON1=()
if [ "${PIN:-1}" = 1 ]; then taskset -pc 0 $$ >/dev/null; ON1=(taskset -c 1); fi
export CPU_SOURCE=stat

rm -rf "$WORK" "$SHM" && mkdir -p "$WORK/www" "$WORK/origin" "$SHM"
head -c 1024 /dev/zero | tr '\0' 'a' > "$WORK/www/1k"
{ head -c 93184 /dev/urandom | base64 -w 100 || true; } | head -c 93184 > "$WORK/www/91k"
for size in ${SIZES:-}; do  # another size in KiB, such as SIZES=256k
    [ -e "$WORK/www/$size" ] || { head -c $((${size%k} * 1024)) /dev/urandom | base64 -w 100 || true; } |
        head -c $((${size%k} * 1024)) > "$WORK/www/$size"
done

{
    nginx_main "$WORK/origin" 1
    echo "http { access_log $WORK/origin.log; keepalive_requests 1000000; sendfile on;"
    echo "  server { listen 127.0.0.1:$ORIGIN reuseport; root $WORK/www; add_header Cache-Control max-age=3600; } }"
} > "$WORK/origin.conf"
: > "$WORK/origin.log"
nginx -c "$WORK/origin.conf" & PIDS+=($!)

cat > "$WORK/slipstream.toml" <<CONF
workers = 1
[[listen]]
address = "127.0.0.1:$SLIP"
[upstreams.origin]
servers = ["127.0.0.1:$ORIGIN"]
[cache_zones.main]
memory = "256m"
max_object = "8m"
[[sites]]
default = true
cache = { zone = "main" }
routes = [{ location = "/", upstream = "origin" }]
CONF
"${ON1[@]}" "$BIN" run --config "$WORK/slipstream.toml" 2>"$WORK/slipstream.err" & PIDS+=($!)
SLIP_PID=$!
sed -e "s/:$SLIP\"/:$SLIP_DISK\"/" -e "s|^max_object = .*|max_object = \"512\"\npath = \"$SHM/slip-disk\"\ndisk = \"256m\"|" \
    "$WORK/slipstream.toml" > "$WORK/slip-disk.toml"
"${ON1[@]}" "$BIN" run --config "$WORK/slip-disk.toml" 2>"$WORK/slip-disk.err" & PIDS+=($!)
SLIP_DISK_PID=$!

NGX_CACHE='proxy_cache main; proxy_cache_valid 200 10m; add_header X-Cache-Status $upstream_cache_status;'
for kind in nginx:$NGX nginx-ofc:$NGX_OFC; do
    name=${kind%%:*} ofc=""
    if [ "$name" = nginx-ofc ]; then ofc="open_file_cache max=1000 inactive=60s;"; fi
    write_proxy_conf "$WORK/$name.conf" "${kind##*:}" $ORIGIN "access_log off; sendfile on; $ofc
    proxy_cache_path $SHM/$name levels=1:2 keys_zone=main:10m max_size=256m inactive=10m use_temp_path=off;" \
        "$NGX_CACHE"
    "${ON1[@]}" nginx -c "$WORK/$name.conf" & PIDS+=($!)
done

printf 'vcl 4.1;\nbackend origin { .host = "127.0.0.1"; .port = "%s"; }\n' $ORIGIN > "$WORK/default.vcl"
"${ON1[@]}" varnishd -F -n "$WORK/varnish" -a 127.0.0.1:$VARNISH -f "$WORK/default.vcl" -T none \
    -s malloc,256m -p thread_pools=1 -p thread_pool_min=$((CONNS + 10)) -p thread_pool_max=500 \
    >"$WORK/varnish.log" 2>&1 & PIDS+=($!)

for port in $ORIGIN $SLIP $SLIP_DISK $NGX $NGX_OFC $VARNISH; do # Varnish compiles its VCL first
    for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.2; done
done

server_pids() { # name -> the processes whose CPU counts (nginx: master and worker; Varnish: manager and child)
    case $1 in
        slipstream) echo "$SLIP_PID" ;;
        slip-disk) echo "$SLIP_DISK_PID" ;;
        nginx) listener_pids $NGX ;;
        nginx-ofc) listener_pids $NGX_OFC ;;
        varnish) pgrep -f "varnishd -F -n $WORK/varnish" | tr '\n' ' ' ;;
    esac
}

# Fills the cache with one request, then asks again until the answer is a hit (fails loudly if
# it never is), and prints the evidence.
verify_hit() { # name port size
    local head="" proof="" pattern
    case $1 in
        slip*) pattern='^cache-status: slipstream; hit' ;;
        nginx*) pattern='^x-cache-status: HIT' ;;
        varnish) pattern='^x-varnish: [0-9]+ [0-9]+' ;;
    esac
    curl -s -o /dev/null "http://127.0.0.1:$2/$3"
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        head=$(curl -s -D - -o /dev/null "http://127.0.0.1:$2/$3" | tr -d '\r' || true)
        proof=$(grep -iE "$pattern" <<< "$head" || true)
        [ -n "$proof" ] && break
        sleep 0.2
    done
    if [ -z "$proof" ] || ! grep -qi "^content-length: $(stat -c %s "$WORK/www/$3")" <<< "$head"; then
        printf 'FAIL: %s does not answer %s from its cache:\n%s\n' "$1" "$3" "$head" >&2
        exit 1
    fi
    printf '%-10s %-3s %s; %s\n' "$1" "$3" "$proof" "$(grep -i '^age:' <<< "$head" || echo 'no Age')"
}

# Nanoseconds the threads of the given processes spent runnable but waiting for a CPU.
queued_ns() {
    local p
    for p in "$@"; do cat /proc/"$p"/task/*/schedstat; done | awk '{ s += $2 } END { printf "%.0f", s }'
}

run() { # name port size -> "req/s p50us p99us cpu_us_per_req syscalls_per_req queued%"
    local before after pids q0 q1 out
    before=$(wc -l < "$WORK/origin.log")
    pids=$(server_pids "$1")
    # shellcheck disable=SC2086
    q0=$(queued_ns $pids)
    out=$(WARMUP=2 wrk_measure "$pids" "http://127.0.0.1:$2/$3")
    # shellcheck disable=SC2086
    q1=$(queued_ns $pids)
    echo "$out $(awk -v q=$((q1 - q0)) -v d="$DURATION" 'BEGIN { printf "%.1f", q / ((d + 2) * 1e7) }')"
    after=$(wc -l < "$WORK/origin.log")
    if [ "$after" != "$before" ]; then
        printf 'FAIL: the origin got %s requests during %s %s: not all hits\n' $((after - before)) "$1" "$3" >&2
        exit 1
    fi
}

ROUNDS=${ROUNDS:-3}
TARGETS=(slipstream:$SLIP slip-disk:$SLIP_DISK nginx:$NGX nginx-ofc:$NGX_OFC varnish:$VARNISH)
selected() { case " ${SERVERS:-slipstream slip-disk nginx nginx-ofc varnish} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

printf '\nHits verified before measuring:\n\n'
for size in ${SIZES:-1k 91k}; do
    for target in "${TARGETS[@]}"; do
        if selected "${target%%:*}"; then verify_hit "${target%%:*}" "${target##*:}" "$size"; fi
    done
done
printf '\n%s -t1 -c%s -d%ss per cell, cache hits only; each cache on one core (%s); %s cores; %s rounds, alternating order\n' \
    "$(basename "${WRK:-wrk}")" "$CONNS" "$DURATION" "$([ "${PIN:-1}" = 1 ] && echo 'pinned to CPU 1, wrk to CPU 0' || echo 'not pinned')" "$CORES" "$ROUNDS"
: > "$WORK/summary"
for size in ${SIZES:-1k 91k}; do
    printf '\n### %s hits\n\n' "$size"
    printf '| %-10s | %9s | %8s | %8s | %8s | %10s | %12s | %8s |\n' cache 'req/s' 'vs nginx' 'p50 us' 'p99 us' 'CPU us/req' 'syscalls/req' 'queued %'
    printf '|%s|\n' '------------|-----------|----------|----------|----------|------------|--------------|----------'
    : > "$WORK/results"
    for round in $(seq 1 "$ROUNDS"); do
        order=("${TARGETS[@]}")
        if [ $((round % 2)) -eq 0 ]; then
            order=(); for ((i = ${#TARGETS[@]} - 1; i >= 0; i--)); do order+=("${TARGETS[$i]}"); done
        fi
        for target in "${order[@]}"; do
            name=${target%%:*}
            selected "$name" || continue
            { printf '%s ' "$name"; run "$name" "${target##*:}" "$size"; } >> "$WORK/results"
        done
    done
    awk '{ n[$1]++; r[$1]+=$2; a[$1]+=$3; b[$1]+=$4; c[$1]+=$5; s[$1]+=$6; q[$1]+=$7 }
        END { for (k in n) printf "%s %.0f %.0f %.0f %.2f %.2f %.1f\n", k, r[k]/n[k], a[k]/n[k], b[k]/n[k], c[k]/n[k], s[k]/n[k], q[k]/n[k] }' \
        "$WORK/results" > "$WORK/means"
    base=$(awk '$1=="nginx" {print $2}' "$WORK/means")
    for target in "${TARGETS[@]}"; do
        selected "${target%%:*}" || continue
        awk -v name="${target%%:*}" -v base="${base:-0}" '$1==name {
            printf "| %-10s | %9.0f | %8s | %8.0f | %8.0f | %10.1f | %12.1f | %8.1f |\n", name, $2,
                (base ? sprintf("%.2f", $2/base) : "-"), $3, $4, $5, $6, $7 }' "$WORK/means"
    done
    awk -v size="$size" '{ r[$1]=$2; c[$1]=$5 }
        END { for (t = 1; t <= 2; t++) { s = (t == 1 ? "slipstream" : "slip-disk")
            if (!r[s]) continue
            printf "%s %s %s %s %s\n", size, s, (r["nginx"] ? r[s]/r["nginx"] : "-"),
            (r["nginx-ofc"] ? r[s]/r["nginx-ofc"] : "-"), (c["varnish"] ? c[s]/c["varnish"] : "-") } }' \
        "$WORK/means" >> "$WORK/summary"
done

printf '\n### Against the targets\n\n'
printf '| size | tier | /nginx req/s (>= 1.30) | /nginx-ofc req/s | /varnish CPU per hit (<= 1.00) |\n'
printf '|------|------|-----------|-----------|-----------|\n'
awk 'function f(v, goal, ge) { if (v == "-") return "-"; return sprintf("%.2f %s", v, (ge ? v >= goal : v <= goal) ? "met" : "MISSED") }
    { printf "| %s | %s | %s | %s | %s |\n", $1, ($2 == "slipstream" ? "memory" : "disk"), f($3, 1.3, 1), ($4 == "-" ? "-" : sprintf("%.2f", $4)), f($5, 1.0, 0) }' "$WORK/summary"
printf '\nThe origin answered %s requests in all (start-up probes and the misses that filled the caches).\n' "$(wc -l < "$WORK/origin.log")"

if [ -n "${PROFILE:-}" ]; then
    wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$SLIP/$PROFILE" >/dev/null
    perf record -q -F 4000 -e cpu-clock --call-graph dwarf,16384 -o "$WORK/slipstream.perf" -p "$SLIP_PID" -- sleep 5 >/dev/null 2>&1 &
    perf_pid=$!
    wrk -t1 -c"$CONNS" -d6s "http://127.0.0.1:$SLIP/$PROFILE" >/dev/null
    wait "$perf_pid" || true
    printf '\n### Where slipstream spends a %s hit (perf record -e cpu-clock, self time)\n\n' "$PROFILE"
    perf report -i "$WORK/slipstream.perf" --no-children --sort dso --stdio -g none 2>/dev/null |
        awk '$1 ~ /%$/ { printf "%-10s %s\n", $1, $2 }'
    echo
    perf report -i "$WORK/slipstream.perf" --no-children --sort dso,sym --stdio -g none 2>/dev/null |
        awk '$1 ~ /%$/ && n++ < 30 { $2 = ""; print }'
fi
