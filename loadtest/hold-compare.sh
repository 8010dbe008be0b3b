#!/usr/bin/env bash
# Server memory per parked long-poll and per open SSE stream, pushgate
# against Nchan: each round starts a fresh server, reads its PSS (every
# process of it: Nchan's master and workers), holds N requests open with
# loadtest/hold-http.py, reads the PSS again while they are held, and stops
# the server. Both servers give each client its user's channel and the
# broadcast one. Results: loadtest/results/hold-<UTC time>/summary.md.
#
# Usage: loadtest/hold-compare.sh   (ROUNDS=3, N=10000)
# Needs target/release/pushgate (cargo build --release) and Nchan
# (loadtest/peers/nchan/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
N=${N:-10000}
bin=${CARGO_TARGET_DIR:-target}/release/pushgate
[[ -x $bin ]] || { echo "hold-compare: no $bin (cargo build --release)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$bin" "$tmp/pushgate"
export LOADTEST_PUSHGATE_BIN="$tmp/pushgate"

out="loadtest/results/hold-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
echo "pushgate commit: $(git rev-parse --short HEAD), load average at start: $(cut -d' ' -f1-3 /proc/loadavg), N=$N, rounds: $ROUNDS" >"$out/about.txt"

# PSS in KiB of `pid` and its children.
pss() {
    local pid total=0 kib
    for pid in "$1" $(pgrep -P "$1" || true); do
        kib=$(awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null || echo 0)
        total=$((total + kib))
    done
    echo "$total"
}

# One reading: gateway, path template; prints KiB per held request.
measure() {
    local gateway=$1 path=$2 started pid port prefix before during held
    started=$(loadtest/peers/"$gateway"/start.sh)
    pid=$(awk '/^pid/ {print $2}' <<<"$started")
    port=$(awk '/^port/ {print $2}' <<<"$started")
    prefix=$(awk '/^prefix/ {print $2}' <<<"$started")
    sleep 1
    before=$(pss "$pid")
    python3 loadtest/hold-http.py "$port" "$path" "$N" 15 >"$tmp/hold.out" &
    held=$!
    for _ in $(seq 1 60); do
        grep -q '^open' "$tmp/hold.out" && break
        sleep 0.5
    done
    sleep 3
    during=$(pss "$pid")
    kill "$held" 2>/dev/null || true
    wait "$held" 2>/dev/null || true
    loadtest/peers/"$gateway"/stop.sh "$prefix" --remove >/dev/null
    awk -v b="$before" -v d="$during" -v n="$N" 'BEGIN {printf "%.2f", (d - b) / n}'
}

median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

{
    echo "| held on one server ($N) | pushgate KiB each | Nchan KiB each | pushgate / Nchan |"
    echo "|---|--:|--:|--:|"
} >"$out/summary.md"
for kind in poll sse; do
    case $kind in
        poll) pushgate_path='/poll?uid=u' nchan_path='/poll?uid=u' label='parked long-poll' ;;
        sse) pushgate_path='/sse?uid=u' nchan_path='/sub?uid=u' label='SSE stream' ;;
    esac
    : >"$tmp/kib-pushgate" && : >"$tmp/kib-nchan"
    for round in $(seq 1 "$ROUNDS"); do
        p=$(measure pushgate "$pushgate_path")
        n=$(measure nchan "$nchan_path")
        echo "$kind round $round: pushgate $p KiB, nchan $n KiB" | tee -a "$out/runs.txt"
        echo "$p" >>"$tmp/kib-pushgate" && echo "$n" >>"$tmp/kib-nchan"
    done
    p=$(median <"$tmp/kib-pushgate")
    n=$(median <"$tmp/kib-nchan")
    ratio=$(awk -v p="$p" -v n="$n" 'BEGIN {printf "%.2f", p / n}')
    echo "| $label | $p | $n | $ratio |" >>"$out/summary.md"
done
cat "$out/summary.md"
echo "results in $out"
