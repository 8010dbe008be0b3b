#!/usr/bin/env bash
# Reconnect storms with client authentication (issue 17): the storm of
# storm.sh (two release nodes on one Redis, N WebSocket clients on node A,
# broadcasts through node B, node A drained or killed, every client back
# on node B with its cursor), with the clients' identity checked by
# something outside the gateway that a storm could hurt.
#
#   jwks   RS256 tokens with kid "rsa-a" (tests/fixtures/auth/), both nodes
#          with [auth] jwks_url on a JWK set provider (auth-site.py jwks).
#          The provider is stopped once node A holds every client, and stays
#          down to the end: B must admit all of them from its cached set
#          (0 refused, 0 failed). Then, still down, one WebSocket to B with
#          an RS256 token of key rsa-b (kid "rsa-b", a key the provider never
#          served) must be refused 401, and one with a kid "rsa-a" token
#          admitted 101 (so the 0 is not vacuous). B's
#          pushgate_auth_jwks_fetches_total{result="error"} shows that it
#          felt the outage.
#   proxy  The same storm twice on fresh nodes: clients with ?uid= on both
#          nodes (the baseline), then with node B on a connect proxy
#          (auth-site.py proxy: every user allowed after PROXY_DELAY_MS)
#          with connect_proxy_concurrency = PROXY_CONCURRENCY; clients come
#          to B with no token, so B asks the proxy for each. The proxy's
#          max_in_flight must be <= PROXY_CONCURRENCY; every client must
#          be back.
#   control  The jwks storm's clients with no provider, to compare its
#          time until all back with: HS256 tokens ([auth] secret), then
#          the RS256 tokens with key rsa-a as a PEM file (public_keys).
#
# Per storm the load client's JSON, Markdown and chart; summary.tsv has a
# row per storm. Results in loadtest/results/auth-storm-<UTC time>/ (node
# logs are *.log, not committed).
#
# Usage: loadtest/auth-storm.sh [jwks] [proxy] [control]   (default: jwks proxy)
#
# Environment (no name starts with PUSHGATE_):
#   REDIS_HOST, REDIS_PORT   the Redis (default 127.0.0.1:6379)
#   AUTH_STORM_N=10000       clients
#   AUTH_STORM_RUNS=1        runs of each step
#   AUTH_STORM_HOW=kill      how node A goes: kill (SIGKILL, every client
#                            back at once) or drain (SIGTERM, spread)
#   PROXY_CONCURRENCY=64     node B's [auth] connect_proxy_concurrency
#   PROXY_DELAY_MS=3         the proxy's answer time
#   AUTH_STORM_OUT           results directory
#   and storm.sh's STORM_SPREAD, STORM_RATE, STORM_MESSAGES, STORM_AFTER,
#   STORM_CONCURRENCY (loadtest/gateway-config.sh).
# Needs python3 (the sites) and node >= 18 (loadtest/mint-tokens.js).
set -euo pipefail
cd "$(dirname "$0")/.."

REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
N=${AUTH_STORM_N:-10000}
RUNS=${AUTH_STORM_RUNS:-1}
HOW=${AUTH_STORM_HOW:-kill}
PROXY_CONCURRENCY=${PROXY_CONCURRENCY:-64}
PROXY_DELAY_MS=${PROXY_DELAY_MS:-3}
FIXTURES=tests/fixtures/auth

# shellcheck source=loadtest/gateway-config.sh
source loadtest/gateway-config.sh

steps=("$@")
(( ${#steps[@]} > 0 )) || steps=(jwks proxy)
say() { echo "auth-storm: $*" >&2; }
[[ $HOW == kill || $HOW == drain ]] || { say "AUTH_STORM_HOW must be kill or drain"; exit 1; }
(( N <= STORM_MAX_CONNECTIONS )) || { say "AUTH_STORM_N over $STORM_MAX_CONNECTIONS"; exit 1; }
[[ $(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]] || { say "no Redis at $REDIS_HOST:$REDIS_PORT"; exit 1; }
ulimit -n "$(ulimit -Hn)"

tmp=$(mktemp -d /tmp/pushgate-auth-storm.XXXXXX)
copy_release "$tmp"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${AUTH_STORM_OUT:-loadtest/results/auth-storm-$stamp}
mkdir -p "$out"
key_root="loadtest-auth-storm-$stamp"
write_storm_config "$tmp/base.toml" "$tmp/pushgate"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "built from: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src loadtest/src 2>/dev/null || echo ' with uncommitted changes')"
    echo "machine: $(uname -sr), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), open files per process $(ulimit -Hn)"
    echo "clients: $N, node A: $HOW, runs per step: $RUNS"
    echo "node config: $(storm_config_about)"
    echo "jwks: jwks_refresh_secs = 10, tokens RS256 kid rsa-a; proxy: connect_proxy_concurrency = $PROXY_CONCURRENCY, connect_proxy_timeout_ms = 1000, answer after $PROXY_DELAY_MS ms"
} >"$out/about.txt"

# The interpreter itself, not a wrapper (a pyenv shim runs Python as its
# child): the site's pid must be Python's, to stop it by pid.
python=$(python3 -c 'import sys; print(sys.executable)')
# The site (auth-site.py) of the storm under way: its pid and port.
site_pid=""
site_port=""
# start_site NAME ARG...: auth-site.py ARG... writing to "$out/NAME.txt".
start_site() {
    local name=$1
    shift
    "$python" loadtest/auth-site.py "$@" >"$out/$name.txt" 2>&1 &
    site_pid=$!
    site_port=""
    for _ in $(seq 1 50); do
        site_port=$(awk '$1 == "port" { print $2 }' "$out/$name.txt")
        [[ -n $site_port ]] && break
        sleep 0.1
    done
    [[ -n $site_port ]] || { say "auth-site.py $1 did not start (see $out/$name.txt)"; exit 1; }
}
stop_site() {
    if [[ -n $site_pid ]]; then
        kill -TERM "$site_pid" 2>/dev/null || true
        wait "$site_pid" 2>/dev/null || true
    fi
    site_pid=""
}
watcher_pid=""
cleanup() {
    [[ -z $watcher_pid ]] || kill "$watcher_pid" 2>/dev/null || true
    stop_site
    stop_storm_nodes
    delete_storm_keys "$key_root-"
    rm -rf "$tmp"
}
trap cleanup EXIT

# metric ADDR SERIES: the value of SERIES on ADDR's /metrics (empty if none).
metric() {
    curl -s "http://$1/metrics" | awk -v s="$2" '$1 == s { print $2 }'
}
# ws_status ADDR PATH: the status a WebSocket handshake to ADDR gets
# (101 when admitted; the connection is then dropped).
ws_status() {
    curl -s -o /dev/null -w '%{http_code}' --max-time 2 \
        -H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' \
        -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' "http://$1$2" || true
}
# storm NAME URL_A URL_B [VAR=VALUE ...]: runs the load client (with the
# variables) against the nodes started last; false if its checks failed.
storm() {
    local name=$1 url_a=$2 url_b=$3
    shift 3
    storm_command "$name" "$N" "$HOW" "$url_a" "$url_b"
    say "$name: ${storm_cmd[*]}"
    env "$@" "${storm_cmd[@]}"
}
# row NAME [EXTRA...]: the storm's figures (and EXTRA columns) in summary.tsv.
row() {
    local name=$1
    shift
    if [[ ! -f $out/$name.json ]]; then
        printf '%s\tno results\n' "$name" | tee -a "$out/summary.tsv"
        return
    fi
    jq -r --arg name "$name" --arg extra "$*" '.results as $r | [$name, $r.connections_opened,
        $r.storm_reconnects, $r.storm_refused_503, $r.storm_reconnect_failures,
        ($r.storm_all_back_secs // "never (last gain \($r.storm_last_gain_secs // "-") s)"), $r.lost, $r.duplicates] | map(tostring) | join("\t") + "\t" + $extra' \
        "$out/$name.json" | tee -a "$out/summary.tsv"
}

failed=()

jwks_run() {
    local run=jwks-$1 a b
    start_site "$run.site" jwks "$FIXTURES/rsa-a.jwk.json"
    local jwks_env=("PUSHGATE_AUTH_JWKS_URL=http://127.0.0.1:$site_port/.well-known/jwks.json"
        PUSHGATE_AUTH_JWKS_REFRESH_SECS=10)
    write_storm_run_config "$tmp/base.toml" "$tmp/$run.toml" "$key_root-$run"
    start_storm_node "$run.node-a" "$tmp/$run.toml" "${jwks_env[@]}"
    start_storm_node "$run.node-b" "$tmp/$run.toml" "${jwks_env[@]}"
    a=${storm_addrs[0]}
    b=${storm_addrs[1]}
    grep -q "jwk set loaded" "$out/$run.node-a.log" "$out/$run.node-b.log" ||
        { say "$run: a node did not load the jwk set"; exit 1; }
    # The outage: the provider goes once node A holds every client (or
    # after 120 s), before A is signalled STORM_AFTER s into the pushes.
    (
        for _ in $(seq 1 1200); do
            held=$(metric "$a" 'pushgate_connections{transport="ws"}')
            (( ${held%.*} >= N )) 2>/dev/null && break
            sleep 0.1
        done
        kill -TERM "$site_pid"
        echo "provider stopped at $(date -u +%H:%M:%S.%N | cut -c1-12) with node A holding $(metric "$a" 'pushgate_connections{transport="ws"}') clients" >>"$out/$run.outage.txt"
    ) &
    watcher_pid=$!
    storm "$run" "ws://$a/ws?token={token}" "ws://$b/ws?token={token}" \
        "LOADTEST_TOKEN_FILE=$tmp/rs256.tokens" || failed+=("$run")
    wait "$watcher_pid" || true
    watcher_pid=""
    wait "$site_pid" 2>/dev/null || true
    site_pid=""
    # B's failed fetches of the set during the storm (its background
    # refresh, every 10 s, then from 1 s doubling) ...
    local errors='pushgate_auth_jwks_fetches_total{result="error"}' storm_errors fetch_errors
    storm_errors=$(metric "$b" "$errors")
    # ... and, still down, a key B never had is refused (after one fetch
    # for the unknown kid, which fails), a cached one admitted.
    local unknown known
    unknown=$(ws_status "$b" "/ws?token=$(cut -d' ' -f2 "$tmp/unknown-kid.tokens")")
    known=$(ws_status "$b" "/ws?token=$(cut -d' ' -f2 "$tmp/known-kid.tokens")")
    fetch_errors=$(metric "$b" "$errors")
    {
        echo "B's failed fetches of the set: $storm_errors by the end of the storm, $fetch_errors after the probes"
        echo "B's successful fetches: $(metric "$b" 'pushgate_auth_jwks_fetches_total{result="ok"}')"
        echo "during the outage, after the storm: kid rsa-b (unknown) -> $unknown, kid rsa-a (cached) -> $known"
    } >>"$out/$run.outage.txt"
    [[ $unknown == 401 && $known == 101 ]] || failed+=("$run-probes")
    # Known keys: not one connect or reconnect may fail.
    jq -e '.results | .connections_failed == 0 and .storm_reconnect_failures == 0' \
        "$out/$run.json" >/dev/null 2>&1 || failed+=("$run-refused")
    (( ${fetch_errors:-0} > 0 )) || failed+=("$run-outage-unseen")
    row "$run" "fetch_errors=$storm_errors/$fetch_errors unknown_kid=$unknown known_kid=$known"
    stop_storm_nodes
}

# control_run KIND R: the jwks storm's clients with the token checked
# without a provider, for comparison: hs256 (tokens made with the load
# config's secret) or pem (the same RS256 tokens, key rsa-a given as a
# PEM file, [auth] public_keys).
control_run() {
    local kind=$1 run=$1-$2 env=() tokens=rs256
    case $kind in
        hs256) tokens=hs256 ;;
        pem) env=("PUSHGATE_AUTH_PUBLIC_KEYS=$FIXTURES/rsa-a.public.pem") ;;
    esac
    write_storm_run_config "$tmp/base.toml" "$tmp/$run.toml" "$key_root-$run"
    start_storm_node "$run.node-a" "$tmp/$run.toml" "${env[@]}"
    start_storm_node "$run.node-b" "$tmp/$run.toml" "${env[@]}"
    sleep 1
    storm "$run" "ws://${storm_addrs[0]}/ws?token={token}" "ws://${storm_addrs[1]}/ws?token={token}" \
        "LOADTEST_TOKEN_FILE=$tmp/$tokens.tokens" || failed+=("$run")
    row "$run"
    stop_storm_nodes
}

proxy_run() {
    local run=$1 base=baseline-$1 prox=proxy-$1
    # Baseline: the same storm with ?uid= (anonymous) on both nodes.
    write_storm_run_config "$tmp/base.toml" "$tmp/$base.toml" "$key_root-$base"
    start_storm_node "$base.node-a" "$tmp/$base.toml"
    start_storm_node "$base.node-b" "$tmp/$base.toml"
    sleep 1
    storm "$base" "ws://${storm_addrs[0]}/ws?uid={user}" "ws://${storm_addrs[1]}/ws?uid={user}" ||
        failed+=("$base")
    row "$base"
    stop_storm_nodes

    start_site "$prox.site" proxy "$PROXY_DELAY_MS"
    write_storm_run_config "$tmp/base.toml" "$tmp/$prox.toml" "$key_root-$prox"
    start_storm_node "$prox.node-a" "$tmp/$prox.toml"
    start_storm_node "$prox.node-b" "$tmp/$prox.toml" \
        "PUSHGATE_AUTH_CONNECT_PROXY_URL=http://127.0.0.1:$site_port/pushgate-auth" \
        "PUSHGATE_AUTH_CONNECT_PROXY_CONCURRENCY=$PROXY_CONCURRENCY" \
        PUSHGATE_AUTH_CONNECT_PROXY_TIMEOUT_MS=1000
    sleep 1
    local b=${storm_addrs[1]} results=() result max
    # No token and no uid at B: B asks the proxy, which reads sid.
    storm "$prox" "ws://${storm_addrs[0]}/ws?uid={user}" "ws://$b/ws?sid={user}" || failed+=("$prox")
    for result in allowed saturated error timeout; do
        results+=("$result=$(metric "$b" "pushgate_auth_proxy_requests_total{result=\"$result\"}")")
    done
    stop_site
    max=$(awk '$1 == "max_in_flight" { print $2 }' "$out/$prox.site.txt")
    row "$prox" "proxy_max_in_flight=$max/$PROXY_CONCURRENCY ${results[*]}"
    (( ${max:-999999} <= PROXY_CONCURRENCY )) || failed+=("$prox-concurrency")
    stop_storm_nodes
}

printf 'storm\topened\treconnects\trefused_503\treconnect_failures\tall_back_secs\tlost\tduplicated\tnotes\n' >"$out/summary.tsv"
for step in "${steps[@]}"; do
    case $step in
        jwks)
            # Users u0..: kid rsa-a, the key the provider serves; one
            # probe each with kid rsa-b (a real key it never served) and
            # kid rsa-a.
            node loadtest/mint-tokens.js --alg rs256 --key "$FIXTURES/rsa-a.private.test.pem" --kid rsa-a \
                -n "$N" >"$tmp/rs256.tokens"
            node loadtest/mint-tokens.js --alg rs256 --key "$FIXTURES/rsa-b.private.test.pem" --kid rsa-b \
                -n 1 --prefix unknown-kid >"$tmp/unknown-kid.tokens"
            node loadtest/mint-tokens.js --alg rs256 --key "$FIXTURES/rsa-a.private.test.pem" --kid rsa-a \
                -n 1 --prefix known-kid >"$tmp/known-kid.tokens"
            for r in $(seq 1 "$RUNS"); do
                echo "load average before jwks-$r: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/about.txt"
                jwks_run "$r"
            done
            ;;
        control)
            node loadtest/mint-tokens.js --alg rs256 --key "$FIXTURES/rsa-a.private.test.pem" \
                -n "$N" >"$tmp/rs256.tokens"
            node loadtest/mint-tokens.js --alg hs256 --secret "$LOADTEST_SECRET" -n "$N" >"$tmp/hs256.tokens"
            for r in $(seq 1 "$RUNS"); do
                echo "load average before control run $r: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/about.txt"
                control_run hs256 "$r"
                control_run pem "$r"
            done
            ;;
        proxy)
            for r in $(seq 1 "$RUNS"); do
                echo "load average before proxy run $r: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/about.txt"
                proxy_run "$r"
            done
            ;;
        *) say "unknown step $step (jwks, proxy, control)"; exit 1 ;;
    esac
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/about.txt"
say "results in $out"
cat "$out/summary.tsv" >&2
if (( ${#failed[@]} > 0 )); then
    say "FAILED: ${failed[*]}"
    exit 1
fi
