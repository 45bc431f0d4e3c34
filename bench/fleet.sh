#!/usr/bin/env bash
# Question: how fast does a pushed configuration reach every instance of a fleet, and does any
# request fail while it is swapped in?
#
# A three-member etcd cluster on loopback (Debian's etcd-server) and three slipstream
# instances (one worker each) answering from a `return` rule. wrk loads every instance for the
# whole run while `slipstream config push` writes PUSHES configurations, each answering with a
# new body. For each push: the time from the push command's return to every instance answering
# the new body (polled every millisecond). Then an etcd member is killed and the pushes are
# repeated through the two left. Prints the propagation times (p50, p90, max) and wrk's totals
# (requests, non-2xx answers, socket errors) per phase. Then fleet-wide rate limits: what one
# client on all three instances is admitted through a zone of scope "fleet" and one of scope
# "instance", and the request path's cost of counting for the fleet.
#
# Usage: bench/fleet.sh [pushes per phase, default 20]
set -euo pipefail
PUSHES=${1:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${BENCH_DIR:-/tmp/slipstream-fleet}
BIN=${BIN:-$ROOT/target/release/slipstream}
command -v etcd >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null; }
command -v wrk >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release -q)
rm -rf "$WORK" && mkdir -p "$WORK"
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

CLUSTER="" ENDPOINTS=""
for i in 0 1 2; do
    CLUSTER="$CLUSTER${CLUSTER:+,}e$i=http://127.0.0.1:$((23800 + i))"
    ENDPOINTS="$ENDPOINTS${ENDPOINTS:+, }\"http://127.0.0.1:$((23790 + i))\""
done
for i in 0 1 2; do
    etcd --name "e$i" --data-dir "$WORK/e$i" \
        --listen-client-urls "http://127.0.0.1:$((23790 + i))" --advertise-client-urls "http://127.0.0.1:$((23790 + i))" \
        --listen-peer-urls "http://127.0.0.1:$((23800 + i))" --initial-advertise-peer-urls "http://127.0.0.1:$((23800 + i))" \
        --initial-cluster "$CLUSTER" --initial-cluster-state new >"$WORK/e$i.log" 2>&1 &
    PIDS+=($!)
    ETCD[$i]=$!
done
for i in 0 1 2; do
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((23790 + i))/health" | grep -q true && break; sleep 0.1; done
done

own() { # name port admin
    cat <<EOF
workers = 1
admin = "127.0.0.1:$3"
pid_file = "$WORK/$1.pid"
[[listen]]
address = "127.0.0.1:$2"
[cluster]
etcd = [$ENDPOINTS]
prefix = "/bench/fleet"
name = "$1"
state_dir = "$WORK/state-$1"
EOF
}
shared() { printf '[[sites]]\ndefault = true\nrules = [{ return = 200, body = "%s" }]\n' "$1"; }
own pusher 1 1 > "$WORK/pusher.toml"
shared v0 > "$WORK/shared.toml"
# The first push may meet a cluster still electing its leader: tried for up to 10 s.
for try in $(seq 20); do
    "$BIN" config push -c "$WORK/pusher.toml" "$WORK/shared.toml" >/dev/null 2>&1 && break
    [ "$try" = 20 ] && { echo "etcd did not take the first push" >&2; exit 1; }
    sleep 0.5
done
PORTS=(18601 18602 18603)
for n in 0 1 2; do
    own "i$n" "${PORTS[$n]}" $((18611 + n)) > "$WORK/i$n.toml"
    "$BIN" run -c "$WORK/i$n.toml" 2>"$WORK/i$n.log" &
    PIDS+=($!)
done
for p in "${PORTS[@]}"; do
    for _ in $(seq 100); do [ "$(curl -s "http://127.0.0.1:$p/")" = v0 ] && break; sleep 0.05; done
done

# Pushes `count` configurations named `$tag-N`; prints one propagation time (us) per line. The
# polling is one Python process with a connection per instance (spawning curl per poll costs
# more than the swap does).
push_all() { # tag count
    python3 - "$1" "$2" "$BIN" "$WORK" "${PORTS[@]}" <<'PY'
import http.client, subprocess, sys, time
tag, count, binary, work, ports = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
def body(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=2)
        c.request("GET", "/")
        b = c.getresponse().read().decode()
        c.close()
        return b
    except OSError:
        return ""
for k in range(1, count + 1):
    want = f"{tag}-{k}"
    with open(f"{work}/shared.toml", "w") as f:
        f.write(f'[[sites]]\ndefault = true\nrules = [{{ return = 200, body = "{want}" }}]\n')
    subprocess.run([binary, "config", "push", "-c", f"{work}/pusher.toml", f"{work}/shared.toml"], check=True, stdout=subprocess.DEVNULL)
    start = time.monotonic()
    for p in ports:
        while body(p) != want:
            time.sleep(0.001)
    print(int((time.monotonic() - start) * 1e6), flush=True)
    time.sleep(0.2)
PY
}

summary() { # label file-of-us wrk-outputs...
    local label=$1 times=$2; shift 2
    local reqs=0 non2xx=0 errors=0 f
    for f in "$@"; do
        reqs=$((reqs + $(awk '/requests in/ {n = $1} END {print n + 0}' "$f")))
        non2xx=$((non2xx + $(awk '/Non-2xx/ {n = $NF} END {print n + 0}' "$f")))
        errors=$((errors + $(awk '/Socket errors/ {for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+,?$/) n += $i} END {print n + 0}' "$f")))
    done
    sort -n "$times" | awk -v label="$label" -v reqs="$reqs" -v non2xx="$non2xx" -v errors="$errors" '
        { v[NR] = $1 }
        END {
            p50 = v[int((NR + 1) * 0.5)]; p90 = v[int((NR + 1) * 0.9)]; if (p90 == "") p90 = v[NR]
            printf "| %-22s | %6d | %8.1f | %8.1f | %8.1f | %9d | %7d | %13d |\n", label, NR, p50 / 1000, p90 / 1000, v[NR] / 1000, reqs, non2xx, errors
        }'
}

run_phase() { # label tag
    local secs=$((PUSHES / 3 + 6)) outs=() n
    for n in 0 1 2; do
        wrk -t1 -c16 -d"${secs}s" "http://127.0.0.1:${PORTS[$n]}/" > "$WORK/wrk-$2-$n.txt" &
        outs+=("$WORK/wrk-$2-$n.txt")
    done
    sleep 1
    push_all "$2" "$PUSHES" > "$WORK/times-$2.txt"
    wait_wrk
    summary "$1" "$WORK/times-$2.txt" "${outs[@]}"
}
wait_wrk() { while pgrep -f "wrk -t1 -c16" >/dev/null; do sleep 0.2; done; }

printf '\nfleet: 3 etcd members, 3 instances (one worker each) under wrk -t1 -c16 each, %s pushes per phase\n\n' "$PUSHES"
printf '| %-22s | %6s | %8s | %8s | %8s | %9s | %7s | %13s |\n' phase pushes "p50 ms" "p90 ms" "max ms" requests non-2xx "socket errors"
printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' ------------------------ -------- ---------- ---------- ---------- ----------- --------- ---------------
run_phase "all 3 etcd members" a
kill -9 "${ETCD[0]}"
run_phase "etcd member 0 killed" b

# Fleet-wide rate limits: wrk -c4 on every instance at once against one zone of scope "fleet"
# and one of scope "instance" (same rate, burst 5, nodelay, keyed by $remote_addr: one client
# spread over 3 instances). "allowed" is rate x seconds + burst + 1 (what nginx alone would
# admit); "over" is what the fleet admitted past it. Then the request path's cost of counting:
# one instance serving a small file, a rate never reached, alternating rounds of the two scopes.
mkdir -p "$WORK/files/fleet" "$WORK/files/own"
echo ok > "$WORK/files/fleet/index.html"
echo ok > "$WORK/files/own/index.html"
limits_config() { # rate
    cat <<EOF2
[rate_zones.fleet]
key = "\$remote_addr"
rate = "$1r/s"
[rate_zones.own]
key = "\$remote_addr"
rate = "$1r/s"
scope = "instance"
[[sites]]
default = true
routes = [
  { location = "/x", rules = [{ return = 200, body = "limits-$1" }] },
  { location = "/fleet/", root = "$WORK/files", limit_req = [{ zone = "fleet", burst = 5, nodelay = true }] },
  { location = "/own/", root = "$WORK/files", limit_req = [{ zone = "own", burst = 5, nodelay = true }] },
]
EOF2
}
admitted() { # path secs -> "n0 n1 n2"
    local n outs=()
    for n in 0 1 2; do
        wrk -t1 -c4 -d"$2s" "http://127.0.0.1:${PORTS[$n]}$1" > "$WORK/lim-$n.txt" &
        outs+=("$WORK/lim-$n.txt")
    done
    wait_limits
    for n in 0 1 2; do
        awk '/requests in/ {r = $1} /Non-2xx/ {x = $NF} END {printf "%d ", r - x}' "$WORK/lim-$n.txt"
    done
}
wait_limits() { while pgrep -f "wrk -t1 -c4" >/dev/null; do sleep 0.1; done; }
printf '\nfleet-wide rate limits: 3 instances, one client on all three, burst 5 nodelay\n\n'
printf '| %8s | %4s | %-8s | %7s | %-17s | %8s | %6s | %5s |\n' rate secs scope allowed "per instance" admitted over ratio
printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' ---------- ------ ---------- --------- ------------------- ---------- -------- -------
for rate in 20 200; do
    limits_config "$rate" > "$WORK/shared.toml"
    "$BIN" config push -c "$WORK/pusher.toml" "$WORK/shared.toml" >/dev/null
    for p in "${PORTS[@]}"; do
        for _ in $(seq 100); do [ "$(curl -s "http://127.0.0.1:$p/x")" = "limits-$rate" ] && break; sleep 0.05; done
    done
    for secs in 5 20; do
        for scope in fleet own; do
            sleep 2 # the buckets drain between runs
            read -r a b c <<< "$(admitted "/$scope/" "$secs")"
            total=$((a + b + c)) allowed=$((rate * secs + 6))
            printf '| %6sr/s | %4s | %-8s | %7d | %-17s | %8d | %6d | %5.2f |\n' "$rate" "$secs" \
                "$([ $scope = own ] && echo instance || echo fleet)" "$allowed" "$a $b $c" "$total" \
                $((total - allowed)) "$(echo "$total / $allowed" | bc -l)"
        done
    done
done

limits_config 1000000 > "$WORK/shared.toml"
"$BIN" config push -c "$WORK/pusher.toml" "$WORK/shared.toml" >/dev/null
sleep 1
printf '\nthe cost of counting for the fleet: instance i0 alone, wrk -t1 -c16 -d5s, a rate never reached\n\n'
printf '| %5s | %-8s | %9s |\n' round scope "req/s"
printf '|%s|%s|%s|\n' ------- ---------- -----------
for round in 1 2 3; do
    for scope in fleet own; do
        rps=$(wrk -t1 -c16 -d5s "http://127.0.0.1:${PORTS[0]}/$scope/" | awk '/Requests\/sec/ {print $2}')
        printf '| %5s | %-8s | %9s |\n' "$round" "$([ $scope = own ] && echo instance || echo fleet)" "$rps"
    done
done
