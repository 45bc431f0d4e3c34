#!/usr/bin/env bash
# Runs the HTTP WG cache conformance suite (npm `http-cache-tests`) against a caching reverse proxy.
# The caller must already run the proxy in front of 127.0.0.1:PORT; this script installs the suite
# (once), starts the suite's origin on 127.0.0.1:PORT, runs the suite's CLI through the proxy, stops
# the origin and prints a summary (summarise.mjs). See README.md in this directory.
set -euo pipefail

usage() { echo "usage: $0 --origin-port P --proxy-url http://127.0.0.1:Q [--out DIR] [--id TEST]" >&2; exit 2; }
die() { echo "run.sh: $*" >&2; exit 1; }

origin_port='' proxy_url='' out='' test_id=''
while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || usage
  case $1 in
    --origin-port) origin_port=$2 ;;
    --proxy-url) proxy_url=${2%/} ;;  # the CLI appends "/config/..." itself: no trailing slash
    --out) out=$2 ;;
    --id) test_id=$2 ;;
    *) usage ;;
  esac
  shift 2
done
[[ $origin_port =~ ^[0-9]+$ && -n $proxy_url ]] || usage

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=0.4.5
cache_dir=${CACHE_TESTS_DIR:-$HOME/.cache/slipstream/http-cache-tests}
pkg=$cache_dir/node_modules/http-cache-tests
out=${out:-$(mktemp -d "${TMPDIR:-/tmp}/cache-tests.XXXXXX")}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# Install once; the stamp is written only after a complete install.
if [[ ! -e $cache_dir/.installed-$version ]]; then
  mkdir -p "$cache_dir"
  npm install --prefix "$cache_dir" --no-audit --no-fund --loglevel=error "http-cache-tests@$version" >/dev/null
  touch "$cache_dir/.installed-$version"
fi

origin_pid=''
cleanup() {
  if [[ -n $origin_pid ]]; then kill "$origin_pid" 2>/dev/null || true; wait "$origin_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

origin=http://127.0.0.1:$origin_port
if curl -s -o /dev/null --max-time 2 "$origin/"; then die "something already answers on $origin"; fi

# The package's `npm run server` backgrounds node itself (`node server/server.mjs &`), losing the pid,
# and the server listens on all interfaces. So start it directly, with the settings npm would pass as
# npm_config_* variables, and a preloaded one-liner that makes listen(port) bind 127.0.0.1 only.
# Run from the package directory: the origin serves files from its working directory.
loopback_only='data:text/javascript,import http from "node:http"; const listen = http.Server.prototype.listen; http.Server.prototype.listen = function (port) { return listen.call(this, port, "127.0.0.1") }'
(cd "$pkg" && npm_config_protocol=http npm_config_port=$origin_port npm_config_pidfile=$out/origin.pid \
  exec node --import "$loopback_only" server/server.mjs) >"$out/origin.log" 2>&1 &
origin_pid=$!
for _ in $(seq 100); do
  kill -0 "$origin_pid" 2>/dev/null || die "origin exited: $(cat "$out/origin.log")"
  curl -s -o /dev/null --max-time 1 "$origin/" && break
  sleep 0.1
done
curl -s -o /dev/null --max-time 1 "$origin/" || die "origin did not start on $origin"
curl -s -o /dev/null --max-time 5 "$proxy_url/" || die "proxy $proxy_url does not answer"

# The CLI (`npm run cli` = `node --no-warnings cli.mjs`) reads --base/--id as npm_config_* variables;
# set them directly (an empty id must come from npm_package_config_id, as npm would set it from
# package.json). It prints JSON for a full run, a request/response dump for one --id.
cli() {
  (cd "$pkg" && npm_config_base=$proxy_url npm_config_id=$test_id npm_package_config_id='' \
    timeout --foreground "${CACHE_TESTS_TIMEOUT:-300}" node --no-warnings cli.mjs)
}
if [[ -n $test_id ]]; then
  cli | tee "$out/$test_id.log"
  exit 0
fi
start=$SECONDS
cli >"$out/results.json" || die "CLI failed or timed out (CACHE_TESTS_TIMEOUT=${CACHE_TESTS_TIMEOUT:-300})"
[[ -s $out/results.json ]] || die "CLI produced no results (see its error above)"
echo "cache-tests: $((SECONDS - start)) s against $proxy_url; results in $out/results.json"
cleanup; origin_pid=''
node "$here/summarise.mjs" "$pkg" "$out/results.json"
