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
