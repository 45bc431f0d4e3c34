#!/usr/bin/env bash
# Question: field report 001's shape, nginx in front of PHP-FPM under wrk -c1000 -- does
# slipstream keep PHP-FPM busy without running out of ports or piling up TIME_WAIT?
#
# wrk -t2 -c1000 -> proxy (one worker) -> PHP-FPM over TCP (pm = static, 8 children; each proxy
# gets its own pool, so TIME_WAIT and connection counts are its own) -> a small PHP page.
#   slipstream    protocol = "fastcgi", max_conns = 8 (the pool's children); kept connections
#   nginx-report  fastcgi_pass 127.0.0.1:PORT, as field report 001 configured it: a new
#                 connection per request (worker_connections 4096 rather than the report's
#                 1024, so that the connection limit is not what is measured)
#   nginx-tuned   fastcgi_keep_conn on + upstream keepalive 8
#   haproxy       fcgi-app with option keep-conn, server maxconn 8 (requests queue in HAProxy)
# Columns: req/s, p50, p99, socket errors and non-2xx/3xx responses (wrk), proxy CPU
# microseconds per request, syscalls per request (perf), TIME_WAIT sockets to the proxy's pool
# at the end of the run (the most over the rounds; they last 60 s), and connections the proxy
# opened to PHP-FPM while measured (connect(2) calls, perf).
#
# Usage: bench/fastcgi.sh [seconds per run, default 20] [connections, default 1000]
# SERVERS="slipstream nginx-tuned" narrows the run; ROUNDS=N (default 2) alternates the order.
# Installs nginx, haproxy, wrk, perf and php-fpm with apt-get when missing (needs root).
set -euo pipefail
DURATION=${1:-20}
CONNS=${2:-1000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-fastcgi-bench}
SLIP=18201 NGX_REPORT=18202 NGX_TUNED=18203 HAP=18204
declare -A POOL=([slipstream]=19001 [nginx-report]=19002 [nginx-tuned]=19003 [haproxy]=19004)

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
FPM=$(ls /usr/sbin/php-fpm* 2>/dev/null | head -1 || true)
if [ -z "$FPM" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq php-fpm >/dev/null
    FPM=$(ls /usr/sbin/php-fpm* | head -1)
fi
(cd "$ROOT" && cargo build --release -q)
SLIPSTREAM="$ROOT/target/release/slipstream"
ulimit -n "$(ulimit -Hn)"

rm -rf "$WORK" && mkdir -p "$WORK/www"
cat > "$WORK/www/index.php" <<'PHP'
<?php
$name = htmlspecialchars($_GET['name'] ?? 'world');
echo "<!doctype html><title>hello</title><p>Hello, $name! It is ", date('H:i:s'), ".</p>\n";
PHP

{
    printf '[global]\nerror_log = %s/fpm.log\npid = %s/fpm.pid\ndaemonize = no\n' "$WORK" "$WORK"
    for name in "${!POOL[@]}"; do
        printf '[%s]\nlisten = 127.0.0.1:%s\nlisten.backlog = 4096\npm = static\n' "$name" "${POOL[$name]}"
        printf 'pm.max_children = 8\n'
    done
} > "$WORK/fpm.conf"
"$FPM" -F -R -y "$WORK/fpm.conf" >/dev/null 2>&1 & PIDS+=($!)

cat > "$WORK/slipstream.toml" <<CONF
workers = 1
admin = "127.0.0.1:18209"
[[listen]]
address = "127.0.0.1:$SLIP"
backlog = 4096
[upstreams.php]
protocol = "fastcgi"
servers = ["127.0.0.1:${POOL[slipstream]}"]
root = "$WORK/www"
max_conns = 8
[[sites]]
default = true
routes = [{ path = "/", upstream = "php" }]
CONF
"$SLIPSTREAM" run --config "$WORK/slipstream.toml" 2>"$WORK/slipstream.err" & PIDS+=($!)
SLIP_PID=$!

write_nginx() { # file port upstream-block keep-conn-directive
    cat > "$1" <<CONF
worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
pid $1.pid;
error_log $1.error.log;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    $3
    server {
        listen 127.0.0.1:$2 reuseport backlog=4096;
        root $WORK/www;
        index index.php;
        location ~ \.php\$ {
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
            fastcgi_pass $4;
        }
    }
}
CONF
}
write_nginx "$WORK/nginx-report.conf" $NGX_REPORT "" "127.0.0.1:${POOL[nginx-report]}"
write_nginx "$WORK/nginx-tuned.conf" $NGX_TUNED \
    "upstream php { server 127.0.0.1:${POOL[nginx-tuned]}; keepalive 8; }" \
    "php; fastcgi_keep_conn on"
nginx -c "$WORK/nginx-report.conf" & PIDS+=($!)
nginx -c "$WORK/nginx-tuned.conf" & PIDS+=($!)

{
    haproxy_head 1
    printf 'fcgi-app php\n    docroot %s\n    index index.php\n    option keep-conn\n' "$WORK/www"
    printf 'frontend web\n    bind 127.0.0.1:%s\n    default_backend php\n' $HAP
    printf 'backend php\n    use-fcgi-app php\n'
    printf '    server fpm 127.0.0.1:%s proto fcgi maxconn 8\n' "${POOL[haproxy]}"
} > "$WORK/haproxy.cfg"
haproxy -f "$WORK/haproxy.cfg" >"$WORK/haproxy.log" 2>&1 & PIDS+=($!)
HAP_PID=$!
sleep 1

server_pids() {
    case $1 in
        $SLIP) echo "$SLIP_PID" ;;
        $HAP) echo "$HAP_PID" ;;
        *) listener_pids "$1" ;;
    esac
}

time_wait() { # pool-port
    ss -tanH state time-wait "( dport = :$1 or sport = :$1 )" | wc -l
}

run() { # name port -> "req/s p50 p99 errors non2xx cpu_us sys_per_req time_wait opened"
    local name=$1 port=$2 pool=${POOL[$1]} pids before after
    wrk -t2 -c"$CONNS" -d2s "http://127.0.0.1:$port/index.php" >/dev/null
    pids=$(server_pids "$port")
    # shellcheck disable=SC2086
    perf stat -e raw_syscalls:sys_enter,syscalls:sys_enter_connect -x, -o "$WORK/perf.txt" -p "$(echo $pids | tr ' ' ',')" -- sleep "$DURATION" 2>/dev/null &
    local perf_pid=$!
    # shellcheck disable=SC2086
    before=$(cpu_ns $pids)
    wrk -t2 -c"$CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:$port/index.php?name=wrk" > "$WORK/wrk-$name.txt"
    # shellcheck disable=SC2086
    after=$(cpu_ns $pids)
    wait "$perf_pid" || true
    local tw; tw=$(time_wait "$pool")
    local rps reqs p50 p99 sys errors non2xx opened
    rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk-$name.txt")
    reqs=$(awk '/requests in/ {print $1}' "$WORK/wrk-$name.txt")
    p50=$(awk '$1=="50%" {print $2}' "$WORK/wrk-$name.txt" | to_us)
    p99=$(awk '$1=="99%" {print $2}' "$WORK/wrk-$name.txt" | to_us)
    errors=$(awk '/Socket errors/ {gsub(/,/,""); print $4+$6+$8+$10}' "$WORK/wrk-$name.txt")
    non2xx=$(awk '/Non-2xx/ {print $5}' "$WORK/wrk-$name.txt")
    sys=$(awk -F, '/raw_syscalls:sys_enter/ {print $1}' "$WORK/perf.txt")
    opened=$(awk -F, '/syscalls:sys_enter_connect/ {print $1}' "$WORK/perf.txt")
    echo "$rps $p50 $p99 ${errors:-0} ${non2xx:-0} $(awk -v c=$((after - before)) -v n="$reqs" 'BEGIN {printf "%.1f", c/1000/n}') $(awk -v s="${sys:-0}" -v n="$reqs" 'BEGIN {printf "%.1f", s/n}') $tw ${opened:-0}"
}

ROUNDS=${ROUNDS:-2}
TARGETS=(slipstream:$SLIP nginx-report:$NGX_REPORT nginx-tuned:$NGX_TUNED haproxy:$HAP)
selected() { case " ${SERVERS:-slipstream nginx-report nginx-tuned haproxy} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

printf '\nwrk -t2 -c%s -d%ss per cell; one proxy worker; PHP-FPM pm=static, 8 children per proxy; %s cores; %s rounds, alternating order\n\n' \
    "$CONNS" "$DURATION" "$(nproc)" "$ROUNDS"
printf '| %-12s | %8s | %9s | %8s | %8s | %7s | %7s | %10s | %12s | %9s | %12s |\n' server 'req/s' 'vs report' 'p50 us' 'p99 us' 'errors' 'non-2xx' 'CPU us/req' 'syscalls/req' 'TIME_WAIT' 'conns opened'
printf '|%s|\n' '--------------|----------|-----------|----------|----------|---------|---------|------------|--------------|-----------|--------------'
: > "$WORK/results"
for round in $(seq 1 "$ROUNDS"); do
    order=("${TARGETS[@]}")
    if [ $((round % 2)) -eq 0 ]; then
        order=(); for ((i = ${#TARGETS[@]} - 1; i >= 0; i--)); do order+=("${TARGETS[$i]}"); done
    fi
    for target in "${order[@]}"; do
        name=${target%%:*} port=${target##*:}
        selected "$name" || continue
        echo "$name $(run "$name" "$port")" >> "$WORK/results"
    done
done
base=$(awk '$1=="nginx-report" {s+=$2; n++} END {print (n ? s/n : 0)}' "$WORK/results")
for target in "${TARGETS[@]}"; do
    name=${target%%:*}
    selected "$name" || continue
    awk -v name="$name" -v base="$base" '
        $1==name { n++; rps+=$2; p50+=$3; p99+=$4; err+=$5; non+=$6; cpu+=$7; sys+=$8; if ($9 > tw) tw=$9; opened+=$10 }
        END {
            printf "| %-12s | %8.0f | %9.2f | %8.0f | %8.0f | %7d | %7d | %10.1f | %12.1f | %9d | %12.0f |\n", name, rps/n, (base ? rps/n/base : 0), p50/n, p99/n, err, non, cpu/n, sys/n, tw, opened/n
        }' "$WORK/results"
done
curl -s http://127.0.0.1:18209/metrics | grep -E '^slipstream_[a-z_]+_total [1-9]' > "$WORK/slipstream-counters.txt" || true
echo
echo "errors and non-2xx are summed over the rounds; conns opened is the mean per run (connect(2) calls while measured)."
