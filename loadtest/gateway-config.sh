# Sourced by the load scripts: the gateway's configuration for load runs.
#
# Only what differs from pushgate's built-in defaults (the repository's
# config.toml is for development and may change under a run); environment
# overrides add the rest. Every client of a load run is 127.0.0.x, so the
# per-address connection limits are off. Every channel is public, so the
# anonymous clients of the channel scenarios (channels=...) may join.

export LOADTEST_API_KEY="loadtest-api-key-not-for-production"

# write_config PATH PUSHGATE_BINARY: writes the config and checks that the
# binary accepts it.
write_config() {
    local path=$1 bin=$2
    {
        printf '[server]\nlisten = "127.0.0.1:0"\ndrain_timeout_secs = 1\ndrain_spread_secs = 0\n\n'
        printf '[auth]\nsecret = "loadtest-secret-not-for-production"\n'
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
    env PUSHGATE_LOG=info "$@" \
        "$tmp/pushgate" --config "$out/gateway.toml" >"$out/$name.gateway.log" 2>&1 &
    gw_pid=$!
    addr=""
    for _ in $(seq 1 100); do
        addr=$(grep -a "serving" "$out/$name.gateway.log" 2>/dev/null | grep -ao '127\.0\.0\.1:[0-9]\+' | head -n1 || true)
        [[ -n "$addr" ]] && break
        sleep 0.1
    done
    [[ -n "$addr" ]] || { echo "${0##*/}: pushgate did not start" >&2; exit 1; }
    sleep 1 # let it settle before the baseline reading
}
