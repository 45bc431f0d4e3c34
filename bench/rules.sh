#!/usr/bin/env bash
# Question: what do nginx-style rules cost per request (issue 33)? A site with 50 regex
# locations (none matching the measured path, so every request tests all 50), 20 response
# fields, two server-level `if`s (one reading a map), a request rate limit per client address (high
# enough never to refuse: every request pays for its check) and an exact health location, against the
# same proxy with one plain prefix route; nginx runs the same site file, slipstream runs `slipstream import` of it.
#
# wrk -> proxy -> nginx origin serving 1 KB, all on loopback, one worker each. Proxies:
#   slip-plain   slipstream, one `path = "/"` route (the baseline)
#   slip-rules   slipstream on `slipstream import` of the rules site
#   nginx-plain  nginx, `location / { proxy_pass ...; }` (upstream keepalive, buffered off log)
#   nginx-rules  nginx on the rules site
# Goal: slip-rules >= 0.95x slip-plain's req/s.
#
# Usage: bench/rules.sh [seconds per run, default 10] [connections, default 50]; ROUNDS=N
# (default 2) alternates the order. Installs nginx, wrk and perf when missing (needs root).
set -euo pipefail
DURATION=${1:-10}
CONNS=${2:-50}
ROUNDS=${ROUNDS:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-rules-bench}
ORIGIN=18200 SLIP_PLAIN=18201 SLIP_RULES=18202 NGX_PLAIN=18203 NGX_RULES=18204

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_install
(cd "$ROOT" && cargo build --release -q)
BIN=$ROOT/target/release/slipstream

rm -rf "$WORK" && mkdir -p "$WORK/www" "$WORK/logs"
head -c 1024 /dev/zero | tr '\0' 'a' > "$WORK/www/1k"
write_origin_conf "$WORK/origin.conf" $ORIGIN "$WORK/www"

# The rules site, as an operator's sites-available file.
rules_site() { # port
    echo "upstream origin { server 127.0.0.1:$ORIGIN; keepalive 100; }"
    echo "map \$http_user_agent \$agent_kind { default other; ~*bot robot; curl curl; }"
    echo "limit_req_zone \$binary_remote_addr zone=perip:10m rate=1000000r/s;"
    echo "server {"
    echo "    listen 127.0.0.1:$1;"
    echo "    server_name bench.example;"
    for i in $(seq 1 20); do echo "    add_header X-Rule-$i value-$i always;"; done
    echo "    if (\$http_x_block = yes) { return 403; }"
    echo "    if (\$agent_kind = robot) { return 403; }"
    echo "    location = /health { return 200 ok; }"
    for i in $(seq 1 50); do
        echo "    location ~ ^/assets$i/(?<name>[^/]+)\\.(css|js|png)\$ { return 404; }"
    done
    echo "    location / { limit_req zone=perip burst=1000 nodelay; proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection \"\"; }"
    echo "}"
}
plain_site() { # port
    echo "upstream origin { server 127.0.0.1:$ORIGIN; keepalive 100; }"
    echo "server { listen 127.0.0.1:$1; location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
}
for kind in rules plain; do
    port=$NGX_RULES; [ $kind = plain ] && port=$NGX_PLAIN
    "${kind}_site" $port > "$WORK/$kind-site.conf"
    { nginx_main "$WORK/nginx-$kind" 1; echo "http { access_log off; keepalive_requests 1000000; include $WORK/$kind-site.conf; }"; } > "$WORK/nginx-$kind.conf"
    mkdir -p "$WORK/nginx-$kind"
done
rules_site $SLIP_RULES > "$WORK/slip-rules-site.conf"
{ echo "workers = 1"; "$BIN" import "$WORK/slip-rules-site.conf" 2>"$WORK/import-notes.txt"; } > "$WORK/slip-rules.toml"
cat > "$WORK/slip-plain.toml" <<EOF
workers = 1
[[listen]]
address = "127.0.0.1:$SLIP_PLAIN"
[upstreams.origin]
servers = ["127.0.0.1:$ORIGIN"]
[[sites]]
routes = [{ path = "/", upstream = "origin" }]
EOF
echo "import notes:"; cat "$WORK/import-notes.txt"

nginx -c "$WORK/origin.conf" & PIDS+=($!)
nginx -c "$WORK/nginx-plain.conf" & PIDS+=($!)
nginx -c "$WORK/nginx-rules.conf" & PIDS+=($!)
"$BIN" run --config "$WORK/slip-plain.toml" 2>"$WORK/logs/slip-plain.log" & PIDS+=($!)
"$BIN" run --config "$WORK/slip-rules.toml" 2>"$WORK/logs/slip-rules.log" & PIDS+=($!)
sleep 1
for port in $SLIP_PLAIN $SLIP_RULES $NGX_PLAIN $NGX_RULES; do
    curl -sf -o /dev/null -H "Host: bench.example" "http://127.0.0.1:$port/1k" || { echo "port $port does not answer" >&2; exit 1; }
done
# The rules are live: the health location answers, the fields are there.
curl -s -H "Host: bench.example" "http://127.0.0.1:$SLIP_RULES/health" | grep -q ok
curl -sI -H "Host: bench.example" "http://127.0.0.1:$SLIP_RULES/1k" | grep -qi '^x-rule-20: value-20'
grep -q 'limit_req' "$WORK/slip-rules.toml" || { echo "the rate limit was not imported" >&2; exit 1; }

run() { # port path
    wrk_measure "$(listener_pids "$1")" "http://127.0.0.1:$1/$2" -H "Host: bench.example"
}
TARGETS=("slip-plain:$SLIP_PLAIN" "slip-rules:$SLIP_RULES" "nginx-plain:$NGX_PLAIN" "nginx-rules:$NGX_RULES")
results_table "1 KB through each proxy, c=$CONNS, ${DURATION}s x $ROUNDS rounds" 1k
