# Shared helpers for the bench scripts (sourced, not run).

# Installs nginx, haproxy, wrk, perf and curl with apt-get when one is missing (needs root).
bench_install() {
    local missing=""
    for tool in nginx haproxy wrk perf curl; do
        command -v "$tool" >/dev/null 2>&1 || missing=1
    done
    if [ -n "$missing" ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light haproxy wrk linux-perf curl >/dev/null
    fi
}

# Sum of on-CPU time in nanoseconds of every thread of the given processes. With
# CPU_SOURCE=stat, the processes' user and system time instead (/proc/PID/stat, in clock ticks):
# coarser, but it keeps the time of threads that have exited (a thread per connection).
cpu_ns() {
    local total=0 p t
    if [ "${CPU_SOURCE:-}" = stat ]; then
        local tick
        tick=$(getconf CLK_TCK)
        for p in "$@"; do
            total=$((total + $(awk -v t="$tick" '{ sub(/^.*\) /, ""); printf "%.0f", ($12 + $13) * 1000000000 / t }' "/proc/$p/stat")))
        done
        echo "$total"
        return
    fi
    for p in "$@"; do
        for t in /proc/"$p"/task/*/schedstat; do
            total=$((total + $(cut -d' ' -f1 "$t")))
        done
    done
    echo "$total"
}

# User and system CPU time in nanoseconds of the given processes, as "user sys" (/proc/PID/stat,
# in clock ticks): whether a proxy's time goes to its own code or to the kernel's.
user_sys_ns() {
    local tick u=0 s=0 p a b
    tick=$(getconf CLK_TCK)
    for p in "$@"; do
        read -r a b < <(awk -v t="$tick" '{ sub(/^.*\) /, ""); printf "%.0f %.0f\n", $12 * 1e9 / t, $13 * 1e9 / t }' "/proc/$p/stat")
        u=$((u + a)) s=$((s + b))
    done
    echo "$u $s"
}

# Sum over the given processes of a /proc/PID/status field in kB (VmHWM, VmRSS).
status_kb() {
    local field=$1 total=0 p
    shift
    for p in "$@"; do
        total=$((total + $(awk -v f="$field:" '$1==f {print $2}' /proc/"$p"/status)))
    done
    echo "$total"
}

# Sum over the given processes of bytes sent to storage (/proc/PID/io write_bytes).
disk_write_bytes() {
    local total=0 p
    for p in "$@"; do
        total=$((total + $(awk '$1=="write_bytes:" {print $2}' /proc/"$p"/io)))
    done
    echo "$total"
}

# Converts wrk's latency figure (e.g. 812.00us, 1.93ms, 2.01s) on stdin to microseconds.
to_us() { awk '{v=$1; if (v ~ /us$/) {sub(/us/,"",v); print v} else if (v ~ /ms$/) {sub(/ms/,"",v); print v*1000} else if (v ~ /s$/) {sub(/s/,"",v); print v*1000000} else print v}'; }

# PIDs of the processes listening on a local TCP port.
listener_pids() {
    ss -ltnpH "sport = :$1" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u | tr '\n' ' '
}

# Writes an nginx origin config to FILE: one worker, no access log, sendfile, serving ROOT on
# 127.0.0.1:PORT. Its pid and error log go beside FILE.
write_origin_conf() { # file port root [worker_connections]
    cat > "$1" <<EOF
worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
pid $1.pid;
error_log $1.error.log;
events { worker_connections ${4:-4096}; }
http {
    access_log off;
    keepalive_requests 1000000;
    sendfile on;
    server { listen 127.0.0.1:$2 reuseport backlog=4096; root $3; }
}
EOF
}

# Writes an nginx reverse-proxy config to FILE: one worker listening on 127.0.0.1:PORT, proxying
# to 127.0.0.1:ORIGIN over pooled HTTP/1.1 connections; HTTP and LOCATION add directives.
write_proxy_conf() { # file port origin http-extra location-extra
    cat > "$1" <<EOF
worker_processes 1;
daemon off;
pid $1.pid;
error_log $1.error.log;
events { worker_connections 4096; }
http {
    keepalive_requests 1000000;
    $4
    upstream origin { server 127.0.0.1:$3; keepalive 1000; }
    server {
        listen 127.0.0.1:$2 reuseport;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            $5
        }
    }
}
EOF
}

# Prints the global and defaults sections of an HAProxy config: THREADS threads, HTTP mode,
# the usual timeouts, then each further argument as a line of the defaults section.
haproxy_head() { # threads [defaults line...]
    printf 'global\n    nbthread %s\n    maxconn 4000\ndefaults\n    mode http\n' "$1"
    printf '    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n'
    shift
    for line in "$@"; do printf '    %s\n' "$line"; done
}

# Writes the TLS benches' files into DIR: www/0b, www/1k and www/91k bodies, and one ECDSA
# P-256 certificate for localhost as cert.pem and key.pem (both.pem: the two, for HAProxy).
write_tls_files() { # dir
    : > "$1/www/0b"
    head -c 1024 /dev/zero | tr '\0' 'a' > "$1/www/1k"
    { head -c 93184 /dev/urandom | base64 -w 100 || true; } | head -c 93184 > "$1/www/91k"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
        -keyout "$1/key.pem" -out "$1/cert.pem" -subj /CN=localhost \
        -addext subjectAltName=DNS:localhost 2>/dev/null
    cat "$1/cert.pem" "$1/key.pem" > "$1/both.pem"
}

# Prints the main context of a proxying nginx: WORKERS workers, its pid and error log in DIR.
nginx_main() { # dir workers
    printf 'worker_processes %s;\nworker_rlimit_nofile 20000;\ndaemon off;\n' "$2"
    printf 'pid %s/nginx.pid;\nerror_log %s/nginx.error.log;\n' "$1" "$1"
    printf 'events { worker_connections 4096; }\n'
}

# Prints a markdown table of `run PORT ARGS...` (five figures: req/s, p50, p99, CPU and
# syscalls per request, and where `run` gives them two more: the CPU's user and system parts)
# for each name:port of TARGETS, averaged over ROUNDS rounds whose order alternates. Results
# go through $WORK/results.
results_table() { # title args-for-run...
    local title=$1 round target i order split
    shift
    printf '\n### %s\n\n' "$title"
    : > "$WORK/results"
    for round in $(seq 1 "$ROUNDS"); do
        order=("${TARGETS[@]}")
        if [ $((round % 2)) -eq 0 ]; then
            order=()
            for ((i = ${#TARGETS[@]} - 1; i >= 0; i--)); do order+=("${TARGETS[i]}"); done
        fi
        for target in "${order[@]}"; do
            echo "${target%%:*} $(run "${target##*:}" "$@")" >> "$WORK/results"
        done
    done
    split=$(awk 'NF >= 8 { s = 1 } END { print s + 0 }' "$WORK/results")
    if [ "$split" = 1 ]; then
        printf '| %-11s | %9s | %8s | %8s | %10s | %11s | %10s | %12s |\n' proxy 'req/s' 'p50 us' 'p99 us' 'CPU us/req' 'user us/req' 'sys us/req' 'syscalls/req'
        printf '|%s|\n' '-------------|-----------|----------|----------|------------|-------------|------------|--------------'
    else
        printf '| %-11s | %9s | %8s | %8s | %10s | %12s |\n' proxy 'req/s' 'p50 us' 'p99 us' 'CPU us/req' 'syscalls/req'
        printf '|%s|\n' '-------------|-----------|----------|----------|------------|--------------'
    fi
    for target in "${TARGETS[@]}"; do
        awk -v name="${target%%:*}" -v wide="$split" '$1==name { n++; r+=$2; a+=$3; b+=$4; c+=$5; s+=$6; u+=$7; k+=$8 }
            END {
                if (wide) printf "| %-11s | %9.0f | %8.0f | %8.0f | %10.1f | %11.1f | %10.1f | %12.1f |\n", name, r/n, a/n, b/n, c/n, u/n, k/n, s/n
                else printf "| %-11s | %9.0f | %8.0f | %8.0f | %10.1f | %12.1f |\n", name, r/n, a/n, b/n, c/n, s/n
            }' "$WORK/results"
    done
}

# Runs wrk -t${WRK_THREADS:-1} -c$CONNS on URL for $DURATION seconds (after a warm-up of ${WARMUP:-1} s), with
# any further wrk arguments, counting the CPU time (schedstat) and syscalls (perf) of PIDS.
# Prints "req/s p50us p99us cpu_us_per_req syscalls_per_req".
# WRK=another client with wrk's arguments and output lines (examples/bench_client) replaces wrk.
wrk_measure() { # "pids" url [wrk args...]
    local pids=$1 url=$2 before after perf_pid
    shift 2
    "${WRK:-wrk}" -t"${WRK_THREADS:-1}" -c"$CONNS" -d"${WARMUP:-1}s" "$@" "$url" >/dev/null
    # shellcheck disable=SC2086
    perf stat -e raw_syscalls:sys_enter -x, -o "$WORK/perf.txt" -p "$(echo $pids | tr ' ' ',')" -- sleep "$DURATION" 2>/dev/null &
    perf_pid=$!
    # shellcheck disable=SC2086
    before=$(cpu_ns $pids)
    "${WRK:-wrk}" -t"${WRK_THREADS:-1}" -c"$CONNS" -d"${DURATION}s" --latency "$@" "$url" > "$WORK/wrk.txt"
    # shellcheck disable=SC2086
    after=$(cpu_ns $pids)
    wait "$perf_pid" || true
    local rps reqs p50 p99 sys
    rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk.txt")
    reqs=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
    p50=$(awk '$1=="50%" {print $2}' "$WORK/wrk.txt" | to_us)
    p99=$(awk '$1=="99%" {print $2}' "$WORK/wrk.txt" | to_us)
    sys=$(awk -F, '/raw_syscalls:sys_enter/ {print $1}' "$WORK/perf.txt")
    awk -v rps="$rps" -v p50="$p50" -v p99="$p99" -v cpu=$((after - before)) -v n="$reqs" -v sys="${sys:-0}" \
        'BEGIN { printf "%s %s %s %.1f %.1f\n", rps, p50, p99, cpu/1000/n, sys/n }'
}

# Background processes to stop when the script exits.
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
