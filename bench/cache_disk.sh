#!/usr/bin/env bash
# Two questions about slipstream's response cache beyond hits of small objects (bench/cache.sh):
# 1. A 1 GiB object: filled into the disk tier while it is relayed (the miss), then served from
#    it to 20 clients at once: does the proxy's memory stay bounded? (VmRSS/VmHWM, MiB)
# 2. Field report 001's PHP page behind a 1 s microcache under wrk -c1000: req/s and latency with
#    and without the cache (PHP-FPM 8 children, one slipstream worker), in alternating rounds.
# Needs root for apt-get when nginx, wrk, curl or php-fpm is missing.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
bench_install
FPM=$(ls /usr/sbin/php-fpm* 2>/dev/null | head -1 || true)
if [ -z "$FPM" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq php-fpm >/dev/null
    FPM=$(ls /usr/sbin/php-fpm* | head -1)
fi
(cd "$ROOT" && cargo build --release -q)
SLIPSTREAM="$ROOT/target/release/slipstream"
WORK=${WORK:-/tmp/slipstream-bench-cache-disk}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-10}
ulimit -n "$(ulimit -Hn)"
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
rm -rf "$WORK" && mkdir -p "$WORK/www" "$WORK/cache"

mib() { echo $(( $1 / 1024 )); }

# --- 1. A 1 GiB object through the disk tier -------------------------------------------------
head -c $((1 << 30)) /dev/urandom > "$WORK/www/big.bin"
write_origin_conf "$WORK/origin.conf" 18301 "$WORK/www"
sed -i 's|root '"$WORK"'/www; }|root '"$WORK"'/www; expires 1h; }|' "$WORK/origin.conf"
nginx -c "$WORK/origin.conf" -e "$WORK/origin.conf.error.log" & PIDS+=($!)
cat > "$WORK/disk.toml" <<CONF
workers = 1
[[listen]]
address = "127.0.0.1:18302"
[upstreams.origin]
servers = ["127.0.0.1:18301"]
[cache_zones.big]
memory = "64m"
path = "$WORK/cache"
disk = "4g"
[[sites]]
default = true
cache = { zone = "big" }
routes = [{ location = "/", upstream = "origin" }]
CONF
"$SLIPSTREAM" run --config "$WORK/disk.toml" 2>"$WORK/disk.err" & PIDS+=($!)
PID=$!
sleep 1
want=$(md5sum < "$WORK/www/big.bin" | cut -d' ' -f1)
echo "| phase | clients | seconds | VmRSS after (MiB) | VmHWM (MiB) | bodies intact |"
echo "|---|---|---|---|---|---|"
start=$(date +%s.%N)
got=$(curl -s -D "$WORK/miss.head" http://127.0.0.1:18302/big.bin | md5sum | cut -d' ' -f1)
end=$(date +%s.%N)
grep -qi "cache-status: .*stored" "$WORK/miss.head" || { echo "the miss was not stored"; cat "$WORK/miss.head"; exit 1; }
printf '| miss (filled while relayed) | 1 | %.1f | %s | %s | %s |\n' "$(echo "$end - $start" | bc)" \
    "$(mib "$(status_kb VmRSS "$PID")")" "$(mib "$(status_kb VmHWM "$PID")")" "$([ "$got" = "$want" ] && echo yes || echo NO)"
start=$(date +%s.%N)
CLIENTS=()
for i in $(seq 20); do
    (curl -s -D "$WORK/hit$i.head" http://127.0.0.1:18302/big.bin | md5sum | cut -d' ' -f1 > "$WORK/hit$i.md5") &
    CLIENTS+=($!)
done
# Sampled until the 20 clients are done (the origin and the proxy are jobs of this shell too).
alive() { for c in "${CLIENTS[@]}"; do kill -0 "$c" 2>/dev/null && return 0; done; return 1; }
peak=0
while alive; do
    rss=$(status_kb VmRSS "$PID")
    peak=$(( rss > peak ? rss : peak ))
    sleep 0.2
done
for c in "${CLIENTS[@]}"; do wait "$c" || true; done
end=$(date +%s.%N)
intact=yes
for i in $(seq 20); do
    [ "$(cat "$WORK/hit$i.md5")" = "$want" ] || intact=NO
    grep -qi "cache-status: slipstream; hit" "$WORK/hit$i.head" || intact="NO (not a hit)"
done
printf '| hits from disk (sendfile) | 20 | %.1f | %s (peak %s) | %s | %s |\n' "$(echo "$end - $start" | bc)" \
    "$(mib "$(status_kb VmRSS "$PID")")" "$(mib "$peak")" "$(mib "$(status_kb VmHWM "$PID")")" "$intact"
kill "$PID"; wait "$PID" 2>/dev/null || true
rm -f "$WORK/www/big.bin"

# --- 2. The PHP microcache --------------------------------------------------------------------
cat > "$WORK/www/index.php" <<'PHP'
<?php
$name = htmlspecialchars($_GET['name'] ?? 'world');
echo "<!doctype html><title>hello</title><p>Hello, $name! It is ", date('H:i:s'), ".</p>\n";
PHP
printf '[global]\nerror_log = %s/fpm.log\npid = %s/fpm.pid\ndaemonize = no\n[www]\nlisten = 127.0.0.1:18311\nlisten.backlog = 4096\npm = static\npm.max_children = 8\n' "$WORK" "$WORK" > "$WORK/fpm.conf"
"$FPM" -F -R -y "$WORK/fpm.conf" >/dev/null 2>&1 & PIDS+=($!)
for mode in plain micro; do
    port=$([ $mode = plain ] && echo 18312 || echo 18313)
    cache=$([ $mode = plain ] && echo "" || echo ', cache = { zone = "micro", valid = ["200 1s"] }')
    cat > "$WORK/$mode.toml" <<CONF
workers = 1
[[listen]]
address = "127.0.0.1:$port"
backlog = 4096
[upstreams.php]
protocol = "fastcgi"
servers = ["127.0.0.1:18311"]
root = "$WORK/www"
max_conns = 8
[cache_zones.micro]
memory = "16m"
[[sites]]
default = true
routes = [{ path = "/", upstream = "php"$cache }]
CONF
    "$SLIPSTREAM" run --config "$WORK/$mode.toml" 2>"$WORK/$mode.err" & PIDS+=($!)
done
sleep 1
curl -sf -o /dev/null http://127.0.0.1:18313/index.php
echo
echo "| round | server | req/s | p50 | p99 | non-2xx |"
echo "|---|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
    for mode in plain micro; do
        port=$([ $mode = plain ] && echo 18312 || echo 18313)
        out=$(wrk -t2 -c1000 -d"${DURATION}s" --latency "http://127.0.0.1:$port/index.php" 2>&1)
        rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
        p50=$(awk '$1=="50%" {print $2}' <<<"$out")
        p99=$(awk '$1=="99%" {print $2}' <<<"$out")
        bad=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
        echo "| $round | slipstream $([ $mode = plain ] && echo "+ PHP-FPM" || echo "+ 1 s microcache") | $rps | $p50 | $p99 | ${bad:-0} |"
    done
done
