# Sourced by the load scripts: the gateway's configuration for load runs.
#
# Only what differs from pushgate's built-in defaults (the repository's
# config.toml is for development and may change under a run); environment
# overrides add the rest. Every client of a load run is 127.0.0.x, so the
# per-address connection limits are off. Every channel is public, so the
# anonymous clients of the channel scenarios (channels=...) may join.

export LOADTEST_API_KEY="loadtest-api-key-not-for-production"
# The HS256 secret (scripts mint tokens with it: loadtest/mint-tokens.js).
export LOADTEST_SECRET="loadtest-secret-not-for-production"

# write_config PATH PUSHGATE_BINARY: writes the config and checks that the
# binary accepts it.
write_config() {
    local path=$1 bin=$2
    {
        printf '[server]\nlisten = "127.0.0.1:0"\ndrain_timeout_secs = 1\ndrain_spread_secs = 0\n\n'
        printf '[auth]\nsecret = "%s"\n' "$LOADTEST_SECRET"
        printf 'api_key = "%s"\nanonymous = true\n\n' "$LOADTEST_API_KEY"
        printf '[session]\nmax_connections = 19800\n\n'
        printf '[limits]\npush_rate_per_sec = 0\n'
        printf 'max_connections_per_ip = 0\nconnection_rate_per_ip = 0\n\n'
        printf '[channels]\npublic = ["*"]\n'
    } >"$path"
    if ! "$bin" check-config --config "$path" >/dev/null 2>&1; then
        echo "cannot write a configuration pushgate accepts:" >&2
        "$bin" check-config --config "$path" >&2
        return 1
    fi
}

# The gateway a measurement runs against: `start_gateway NAME [VAR=VALUE ...]`
# starts "$tmp/pushgate" with "$out/gateway.toml" on a free port (its
# address in $addr, its log in "$out/NAME.gateway.log"); `stop_gateway`
# drains it (SIGTERM, then SIGKILL after 20 s). The caller sets $tmp and
# $out and traps EXIT to call stop_gateway.
gw_pid=""
stop_gateway() {
    if [[ -n "$gw_pid" ]] && kill -0 "$gw_pid" 2>/dev/null; then
        kill -TERM "$gw_pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$gw_pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$gw_pid" 2>/dev/null || true
    fi
    gw_pid=""
}
# start_gateway NAME [VAR=VALUE ...]: a fresh pushgate on a free port.
start_gateway() {
    local name=$1
    shift
    launch_gateway "$out/$name.gateway.log" "$out/gateway.toml" "$@"
    gw_pid=$launched_pid
    addr=$launched_addr
    sleep 1 # let it settle before the baseline reading
}

# launch_gateway LOG CONFIG [VAR=VALUE ...]: starts "$tmp/pushgate" with
# CONFIG (and the variables) on the free port the config's listen gives,
# logging to LOG; once it serves, its pid is in $launched_pid and its
# address in $launched_addr. Exits the script if it does not start.
launch_gateway() {
    local log=$1 config=$2
    shift 2
    env PUSHGATE_LOG=info "$@" "$tmp/pushgate" --config "$config" >"$log" 2>&1 </dev/null &
    launched_pid=$!
    launched_addr=""
    for _ in $(seq 1 100); do
        launched_addr=$(grep -a "serving" "$log" 2>/dev/null | grep -ao '127\.0\.0\.1:[0-9]\+' | head -n1 || true)
        [[ -n "$launched_addr" ]] && break
        kill -0 "$launched_pid" 2>/dev/null || break
        sleep 0.1
    done
    [[ -n "$launched_addr" ]] || { echo "${0##*/}: pushgate did not start (see $log)" >&2; exit 1; }
}

# Release binaries: `copy_release DIR` builds pushgate and the load client
# (one at a time, so pushgate gets the features of a plain `cargo build
# --release`) and copies both into DIR, so that others rebuilding the
# target directory (CARGO_TARGET_DIR, when set) cannot change them under a
# run.
copy_release() {
    local dir=$1 release="${CARGO_TARGET_DIR:-target}/release"
    cargo build --release -p pushgate
    cargo build --release -p loadtest
    cp "$release/pushgate" "$release/loadtest" "$dir/"
}

# ---- Reconnect storms: two nodes on one Redis (storm.sh, auth-storm.sh) ----
#
# The caller sets $tmp (holding the binaries) and $out, REDIS_HOST and
# REDIS_PORT, and may set the STORM_* knobs below before sourcing.
: "${STORM_SPREAD:=5}"           # node A's [server] drain_spread_secs
: "${STORM_RATE:=5}"             # broadcasts per second
: "${STORM_MESSAGES:=200}"       # broadcasts after the warm-up
: "${STORM_AFTER:=5}"            # seconds after the first broadcast when A is signalled
: "${STORM_CONCURRENCY:=100}"    # handshakes in flight over all clients
# The process may open 20,000 files here; a node needs some for itself.
STORM_MAX_CONNECTIONS=19850

# write_storm_config PATH PUSHGATE_BINARY: the load config with a drain
# timeout past the spread, max_connections = STORM_MAX_CONNECTIONS, and a
# history that covers a killed node's clients coming back over 30 s of
# broadcasts. `storm_config_about` says so in one line.
write_storm_config() {
    local path=$1 bin=$2
    write_config "$path" "$bin"
    sed -i -e "s/^drain_timeout_secs = .*/drain_timeout_secs = $(( STORM_SPREAD + 15 ))/" \
        -e "s/^drain_spread_secs = .*/drain_spread_secs = $STORM_SPREAD/" \
        -e "s/^max_connections = .*/max_connections = $STORM_MAX_CONNECTIONS/" "$path"
    printf '\n[history]\nsize = 10000\n' >>"$path"
}
storm_config_about() {
    echo "loadtest/gateway-config.sh with drain_timeout_secs = $(( STORM_SPREAD + 15 )), drain_spread_secs = $STORM_SPREAD, max_connections = $STORM_MAX_CONNECTIONS, [history] size = 10000, [broker] kind = \"redis\""
}

# write_storm_run_config BASE PATH KEY_PREFIX: BASE with [broker] on the
# Redis under KEY_PREFIX (each run its own, deleted by delete_storm_keys).
write_storm_run_config() {
    local base=$1 path=$2 prefix=$3
    cp "$base" "$path"
    printf '\n[broker]\nkind = "redis"\nurl = "redis://%s:%s"\nkey_prefix = "%s"\n' \
        "$REDIS_HOST" "$REDIS_PORT" "$prefix" >>"$path"
    "$tmp/pushgate" check-config --config "$path" >/dev/null
}

# delete_storm_keys PREFIX: every Redis key under PREFIX (SCAN, DEL).
delete_storm_keys() {
    redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" --scan --pattern "$1*" |
        xargs -r -n 500 redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" DEL >/dev/null
}

# start_storm_node NAME CONFIG [VAR=VALUE ...]: one more node (A first,
# then B), logged to "$out/NAME.log"; its pid and address are appended to
# storm_pids and storm_addrs. stop_storm_nodes kills them all (SIGKILL:
# a storm's nodes have nothing left to drain).
storm_pids=()
storm_addrs=()
start_storm_node() {
    local name=$1 config=$2
    shift 2
    launch_gateway "$out/$name.log" "$config" "$@"
    storm_pids+=("$launched_pid")
    storm_addrs+=("$launched_addr")
    echo "${0##*/}: $name: pid $launched_pid on $launched_addr" >&2
}
stop_storm_nodes() {
    local pid
    for pid in "${storm_pids[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    storm_pids=()
    storm_addrs=()
}

# storm_command NAME N drain|kill URL_A URL_B: sets storm_cmd to the load
# client's `storm` against the two nodes started last (node A signalled,
# pushes and metrics at node B), writing "$out/NAME".{json,md,svg}, and
# appends it to "$out/commands.txt".
storm_cmd=()
storm_command() {
    local name=$1 n=$2 how=$3 url_a=$4 url_b=$5 flag=()
    [[ $how == kill ]] && flag=(--kill)
    storm_cmd=("$tmp/loadtest" storm -n "$n" -m "$STORM_MESSAGES" -r "$STORM_RATE"
        --ws-url "$url_a,$url_b"
        --push-url "http://${storm_addrs[1]}/push" --metrics-url "http://${storm_addrs[1]}/metrics"
        --node-pid "${storm_pids[0]}" "${flag[@]}" --storm-after-secs "$STORM_AFTER"
        --spread-secs "$STORM_SPREAD" --connect-rate 3000 --connect-concurrency "$STORM_CONCURRENCY"
        --per-worker 10000 --sources 2
        --timeout-secs 300 --check
        --json "$out/$name.json" --markdown "$out/$name.md" --chart "$out/$name.svg")
    echo "$name: ${storm_cmd[*]}" | sed "s|$tmp/loadtest|target/release/loadtest|" >>"$out/commands.txt"
}
