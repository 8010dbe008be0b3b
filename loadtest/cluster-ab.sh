#!/usr/bin/env bash
# Two pushgate builds side by side on loadtest/cluster.sh's personal
# steps: for each round, one cluster.sh run per build (A then B, the order
# swapped every other round), each with fresh nodes and a fresh broker,
# then per run the 3-node against 1-node server CPU while pushing, per
# delivery. For "did this change what a node costs on a Redis Cluster".
#
# Usage: loadtest/cluster-ab.sh A_BINARY B_BINARY
#   ROUNDS=3; CLUSTER_BROKER (default cluster) and the other cluster.sh
#   variables pass through. Results: one cluster.sh directory per run,
#   loadtest/results/cluster-ab-<UTC time>/<build>-<round>/, and
#   ratios.txt beside them.
set -euo pipefail
cd "$(dirname "$0")/.."

(( $# == 2 )) || { sed -n '2,12p' "$0" >&2; exit 2; }
rounds=${ROUNDS:-3}
export CLUSTER_BROKER=${CLUSTER_BROKER:-cluster}
top=loadtest/results/cluster-ab-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$top"
top=$(cd "$top" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$1" "$tmp/a" && cp "$2" "$tmp/b"
echo "A $1 ($(sha256sum <"$1" | cut -c1-12)), B $2 ($(sha256sum <"$2" | cut -c1-12))" >"$top/about.txt"

steps=(personal-1-paced personal-3-paced personal-1 personal-3)
for round in $(seq 1 "$rounds"); do
    order=(a b)
    (( round % 2 == 0 )) && order=(b a)
    for build in "${order[@]}"; do
        out=$top/$build-$round
        status=0
        CLUSTER_OUT=$out LOADTEST_PUSHGATE_BIN=$tmp/$build \
            loadtest/cluster.sh "${steps[@]}" >"$top/$build-$round.log" 2>&1 || status=$?
        echo "$build round $round: exit $status" | tee -a "$top/about.txt"
    done
done

# Server CPU while pushing (all nodes) per delivery, 3 nodes over 1.
for run in "$top"/[ab]-*/; do
    python3 - "$run" <<'EOF'
import json, os, sys

run = sys.argv[1]

def per_delivery(step):
    try:
        with open(os.path.join(run, step + ".json")) as f:
            r = json.load(f)["results"]
        return r["server_cpu_ms"] / r["delivered"] * 1000, r["server_cpu_ms"]
    except (OSError, KeyError, TypeError, ZeroDivisionError, ValueError):
        return None

figures = []
for pace in ("-paced", ""):
    one, three = per_delivery("personal-1" + pace), per_delivery("personal-3" + pace)
    label = "paced" if pace else "flat out"
    if one and three:
        figures.append(
            f"{label}: 1 node {one[1]:.0f} ms, 3 nodes {three[1]:.0f} ms, "
            f"per delivery {one[0]:.2f} / {three[0]:.2f} µs, 3/1 {three[0] / one[0]:.2f}"
        )
    else:
        figures.append(f"{label}: no figures")
print(os.path.basename(run.rstrip("/")) + ": " + "; ".join(figures))
EOF
done | tee "$top/ratios.txt"
