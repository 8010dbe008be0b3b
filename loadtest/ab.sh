#!/usr/bin/env bash
# Two pushgate builds side by side: runs one load-client scenario against
# build A, then B, then A, ... (ROUNDS each, every run against a fresh
# gateway from loadtest/peers/pushgate/start.sh), and prints the figures
# that tell them apart. For "did this change help": build the commit
# before and after into two binaries and compare them here.
#
# Usage: loadtest/ab.sh A_BINARY B_BINARY SCENARIO [loadtest args ...]
#   e.g. loadtest/ab.sh /tmp/before/pushgate target/release/pushgate fanout -n 10000 -m 20 -r 2
#   ROUNDS=3 (rounds per build). Needs target/release/loadtest
#   (cargo build --release -p loadtest; under $CARGO_TARGET_DIR if set).
#   A_ENV, B_ENV: settings for that build's gateway only, as
#   space-separated NAME=value words (PUSHGATE_* overrides), so one binary
#   can be compared with itself under two configurations, e.g.
#   B_ENV="PUSHGATE_SERVER_FANOUT_NICE=0" loadtest/ab.sh bin bin fanout ...
set -euo pipefail
cd "$(dirname "$0")/.."

(( $# >= 3 )) || { sed -n '2,16p' "$0" >&2; exit 2; }
a=$1 b=$2 scenario=$3
shift 3
rounds=${ROUNDS:-3}
read -ra a_env <<<"${A_ENV:-}"
read -ra b_env <<<"${B_ENV:-}"
for setting in "${a_env[@]}" "${b_env[@]}"; do
    [[ $setting =~ ^PUSHGATE_[A-Z0-9_]+=.*$ ]] ||
        { echo "ab: A_ENV/B_ENV take PUSHGATE_NAME=value words, not '$setting'" >&2; exit 2; }
done
client=${CARGO_TARGET_DIR:-target}/release/loadtest
[[ -x $client ]] || { echo "ab: no $client (cargo build --release -p loadtest)" >&2; exit 1; }
export LOADTEST_API_KEY="loadtest-api-key-not-for-production"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$a" "$tmp/a" && cp "$b" "$tmp/b"
cp "$client" "$tmp/loadtest"

for round in $(seq 1 "$rounds"); do
    for build in a b; do
        prefix="$tmp/gw-$build-$round"
        if [[ $build == a ]]; then settings=("${a_env[@]}"); else settings=("${b_env[@]}"); fi
        started=$(env "${settings[@]}" LOADTEST_PUSHGATE_BIN="$tmp/$build" \
            loadtest/peers/pushgate/start.sh "$prefix")
        pid=$(awk '/^pid/ {print $2}' <<<"$started")
        port=$(awk '/^port/ {print $2}' <<<"$started")
        sleep 1
        load=$(cut -d' ' -f1 /proc/loadavg)
        report=$("$tmp/loadtest" "$scenario" "$@" \
            --ws-url "ws://127.0.0.1:$port/ws?uid={user}" \
            --sse-url "http://127.0.0.1:$port/sse?uid={user}" \
            --poll-url "http://127.0.0.1:$port/poll?uid={user}" \
            --push-url "http://127.0.0.1:$port/push" \
            --metrics-url "http://127.0.0.1:$port/metrics" \
            --pid "$pid" 2>&1) || true
        loadtest/peers/pushgate/stop.sh "$prefix" >/dev/null 2>&1 || true
        figures=$(grep -E '^\| (phase [A-Z][^:|]*: )?(lost|duplicated|time to last recipient|time to first recipient|delivery latency|server CPU per|server PSS per connection)[ ,]' <<<"$report" |
            sed -E 's/^\| //; s/ \|$//; s/ \| / /g' | paste -sd ';' -)
        echo "$build round $round (load $load)${settings:+ [${settings[*]}]}: ${figures:-no figures; the run failed:}"
        [[ -n $figures ]] || tail -5 <<<"$report"
        sleep 2
    done
done
