#!/usr/bin/env bash
# Question: does certificate renewal disturb traffic? slipstream gets a.test's certificate from
# a local ACME CA (pebble 2.10, HTTP-01, certificates valid 60 s, so renewed every ~30-54 s)
# while wrk runs HTTPS against it with a new TLS handshake per request (Connection: close).
#
# wrk -> slipstream (TLS, ACME site a.test) -> trivial origin (nginx, else python3), loopback.
# Prints: requests, req/s, wrk socket errors (connect/read/write/timeout), wrk's
# "Non-2xx or 3xx" count, and the distinct certificate serials served during the run (one
# `openssl s_client` sample a second in the background), plus renewals logged and failed samples.
#
# Usage: bench/acme_swap.sh [seconds, default 120]
# SLIPSTREAM=path (default target/release/slipstream, else target/debug/slipstream; not built
# here), CONNS (default 16), BASE_PORT (default 18280; uses 7 ports from it), BENCH_DIR.
# Needs pebble and pebble-challtestsrv ($(go env GOPATH)/bin, installed with go install when
# missing), wrk, openssl, curl. wrk takes SNI from the URL's host, so https://a.test:PORT/ must
# resolve: wrk runs in a private mount namespace with its own /etc/hosts (unshare -m); where that
# is not possible, `127.0.0.1 a.test` is appended to /etc/hosts for the run and the file restored.
set -euo pipefail
DURATION=${1:-120}
CONNS=${CONNS:-16}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-bench-acme-swap}
BASE=${BASE_PORT:-18280}
PLAIN=$BASE TLS=$((BASE + 1)) ORIGIN=$((BASE + 2)) PEBBLE=$((BASE + 3)) PEBBLE_MGMT=$((BASE + 4))
DNS=$((BASE + 5)) CHALL_MGMT=$((BASE + 6))
PEBBLE_VERSION=v2.10.1

if [ -z "${SLIPSTREAM:-}" ]; then
    SLIPSTREAM=$ROOT/target/release/slipstream
    [ -x "$SLIPSTREAM" ] || SLIPSTREAM=$ROOT/target/debug/slipstream
fi
[ -x "$SLIPSTREAM" ] || { echo "no slipstream binary at $SLIPSTREAM (cargo build first)" >&2; exit 1; }
for tool in wrk openssl curl; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install wrk openssl curl)" >&2; exit 1; }
done

GOBIN_DIR=$(go env GOPATH 2>/dev/null)/bin
go_tool() { # name: the installed binary, installed with go install when missing
    if [ -x "$GOBIN_DIR/$1" ]; then echo "$GOBIN_DIR/$1"; return; fi
    if command -v "$1" >/dev/null; then command -v "$1"; return; fi
    go install "github.com/letsencrypt/pebble/v2/cmd/$1@$PEBBLE_VERSION" >&2
    echo "$GOBIN_DIR/$1"
}
PEBBLE_BIN=$(go_tool pebble)
CHALL_BIN=$(go_tool pebble-challtestsrv)

PIDS=()
HOSTS_BACKUP=""
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ -n "$HOSTS_BACKUP" ]; then cat "$HOSTS_BACKUP" > /etc/hosts; fi
}
trap cleanup EXIT

for port in $PLAIN $TLS $ORIGIN $PEBBLE $PEBBLE_MGMT $DNS $CHALL_MGMT; do
    if ss -ltnH "sport = :$port" | grep -q .; then
        echo "port $port is in use (set BASE_PORT)" >&2
        exit 1
    fi
done

rm -rf "$WORK" && mkdir -p "$WORK/www" "$WORK/run" "$WORK/state"
echo ok > "$WORK/www/index.html"

# Pebble's own HTTPS listener: a certificate for localhost from a throwaway CA, which is also
# slipstream's ca_root.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$WORK/ca.key" -out "$WORK/ca.pem" -subj "/CN=acme_swap bench CA" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$WORK/localhost.key" -out "$WORK/localhost.csr" -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$WORK/localhost.ext"
openssl x509 -req -in "$WORK/localhost.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" \
    -CAcreateserial -days 2 -sha256 -extfile "$WORK/localhost.ext" -out "$WORK/localhost.pem" 2>/dev/null

wait_port() { # port seconds
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        ss -ltnH "sport = :$1" | grep -q . && return 0
        sleep 0.1
    done
    echo "nothing listens on port $1 after $2 s" >&2
    return 1
}

# The origin.
if command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; then
    cat > "$WORK/origin.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/origin.pid;
error_log $WORK/origin.error.log;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    server { listen 127.0.0.1:$ORIGIN; root $WORK/www; }
}
EOF
    "$(command -v nginx || echo /usr/sbin/nginx)" -c "$WORK/origin.conf" -e "$WORK/origin.error.log" &
else
    python3 -m http.server "$ORIGIN" --bind 127.0.0.1 --directory "$WORK/www" >/dev/null 2>&1 &
fi
PIDS+=($!)

# The CA: challtestsrv answers DNS (every name is 127.0.0.1), pebble validates HTTP-01 on
# slipstream's plain port.
"$CHALL_BIN" -defaultIPv6 "" -defaultIPv4 127.0.0.1 -dnsserver "127.0.0.1:$DNS" \
    -http01 "" -https01 "" -tlsalpn01 "" -doh "" -management "127.0.0.1:$CHALL_MGMT" \
    > "$WORK/challtestsrv.log" 2>&1 &
PIDS+=($!)
cat > "$WORK/pebble.json" <<EOF
{"pebble": {"listenAddress": "127.0.0.1:$PEBBLE", "managementListenAddress": "127.0.0.1:$PEBBLE_MGMT",
 "certificate": "$WORK/localhost.pem", "privateKey": "$WORK/localhost.key",
 "httpPort": $PLAIN, "tlsPort": $TLS, "ocspResponderURL": "", "externalAccountBindingRequired": false,
 "retryAfter": {"authz": 1, "order": 1},
 "profiles": {"default": {"description": "bench", "validityPeriod": 60}}}}
EOF
PEBBLE_VA_NOSLEEP=1 "$PEBBLE_BIN" -config "$WORK/pebble.json" -dnsserver "127.0.0.1:$DNS" \
    > "$WORK/pebble.log" 2>&1 &
PIDS+=($!)
wait_port "$ORIGIN" 10
wait_port "$PEBBLE" 20

cat > "$WORK/slipstream.toml" <<EOF
workers = 1
[[listen]]
address = "127.0.0.1:$PLAIN"
[[listen]]
address = "127.0.0.1:$TLS"
tls = true
[acme]
directory = "https://localhost:$PEBBLE/dir"
ca_root = "$WORK/ca.pem"
challenge = "http-01"
state_dir = "$WORK/state"
[upstreams.app]
servers = ["127.0.0.1:$ORIGIN"]
[[sites]]
hosts = ["a.test"]
acme = true
routes = [{ path = "/", upstream = "app" }]
EOF
RUNTIME_DIRECTORY=$WORK/run "$SLIPSTREAM" run --config "$WORK/slipstream.toml" > "$WORK/slipstream.log" 2>&1 &
PIDS+=($!)
SLIP_PID=$!
for ((i = 0; i < 600; i++)); do
    grep -q 'ACME: certificate for a.test obtained' "$WORK/slipstream.log" && break
    kill -0 "$SLIP_PID" 2>/dev/null || { echo "slipstream exited:" >&2; cat "$WORK/slipstream.log" >&2; exit 1; }
    sleep 0.1
done
if ! grep -q 'ACME: certificate for a.test obtained' "$WORK/slipstream.log"; then
    echo "no certificate after 60 s; slipstream's log:" >&2
    tail -20 "$WORK/slipstream.log" >&2
    exit 1
fi
OBTAINED_BEFORE=$(grep -c 'ACME: certificate for a.test obtained' "$WORK/slipstream.log")

# wrk resolves a.test through its own /etc/hosts (a private mount namespace), else through the
# real one for the run.
{ cat /etc/hosts; echo "127.0.0.1 a.test"; } > "$WORK/hosts"
if unshare -m sh -c "mount --bind '$WORK/hosts' /etc/hosts && getent hosts a.test" >/dev/null 2>&1; then
    run_wrk() { unshare -m sh -c "mount --bind '$WORK/hosts' /etc/hosts && exec \"\$@\"" sh wrk "$@"; }
else
    HOSTS_BACKUP=$WORK/hosts.orig
    cp /etc/hosts "$HOSTS_BACKUP"
    echo "127.0.0.1 a.test" >> /etc/hosts
    run_wrk() { wrk "$@"; }
fi

# One sample of the served certificate's serial a second, "epoch serial" ("-" when it failed).
sample_serials() {
    local serial
    while :; do
        serial=$(timeout 5 openssl s_client -connect "127.0.0.1:$TLS" -servername a.test </dev/null 2>/dev/null |
            openssl x509 -noout -serial 2>/dev/null | cut -d= -f2) || true
        echo "$(date +%s) ${serial:--}" >> "$WORK/serials"
        sleep 1
    done
}
: > "$WORK/serials"
sample_serials &
SAMPLER=$!
PIDS+=($SAMPLER)

run_wrk -t1 -c"$CONNS" -d"${DURATION}s" -H "Connection: close" "https://a.test:$TLS/" > "$WORK/wrk.txt" 2>&1 || true
kill "$SAMPLER" 2>/dev/null || true
wait "$SAMPLER" 2>/dev/null || true

reqs=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk.txt")
socket=$(awk -F'Socket errors: ' 'NF > 1 {print $2}' "$WORK/wrk.txt")
non2xx=$(awk -F': ' '/Non-2xx or 3xx responses/ {print $2}' "$WORK/wrk.txt")
serials=$(awk '$2 != "-" {print $2}' "$WORK/serials" | sort -u | wc -l)
samples=$(wc -l < "$WORK/serials")
failed=$(awk '$2 == "-"' "$WORK/serials" | wc -l)
renewed=$(($(grep -c 'ACME: certificate for a.test obtained' "$WORK/slipstream.log") - OBTAINED_BEFORE))
if [ -z "$reqs" ]; then
    echo "wrk printed no result:" >&2
    cat "$WORK/wrk.txt" >&2
    exit 1
fi

printf '\n### ACME renewal under load: %s s, wrk -t1 -c%s, Connection: close, %s\n\n' \
    "$DURATION" "$CONNS" "$(basename "$(dirname "$SLIPSTREAM")")"
printf '| %-44s | %-40s |\n' metric value
printf '|%s|%s|\n' '----------------------------------------------' '------------------------------------------'
printf '| %-44s | %-40s |\n' requests "$reqs"
printf '| %-44s | %-40s |\n' 'req/s' "$rps"
printf '| %-44s | %-40s |\n' 'socket errors (connect/read/write/timeout)' "${socket:-connect 0, read 0, write 0, timeout 0}"
printf '| %-44s | %-40s |\n' 'non-2xx/3xx responses' "${non2xx:-0}"
printf '| %-44s | %-40s |\n' 'distinct certificate serials served' "$serials"
printf '| %-44s | %-40s |\n' 'serial samples (failed)' "$samples ($failed)"
printf '| %-44s | %-40s |\n' 'renewals logged during the run' "$renewed"
echo
echo "files: $WORK (wrk.txt, serials, slipstream.log, pebble.log)"
