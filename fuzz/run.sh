#!/usr/bin/env bash
# Runs every fuzz target for a bounded time and fails on any crash.
#
#   fuzz/run.sh [SECONDS_PER_TARGET]     (default 60)
#   TARGETS="cursor token" fuzz/run.sh 10
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). cargo-fuzz wants a nightly
# compiler for -Zsanitizer=address; on a stable toolchain RUSTC_BOOTSTRAP=1
# (set below unless already set) lets the same flags through.
#
# The committed seeds in fuzz/corpus/<target>/ are read, never written:
# new inputs go to a scratch corpus (FUZZ_WORK, default a temporary
# directory), so the generated mass never lands in the repository. A crash
# leaves its input in fuzz/artifacts/<target>/ (git-ignored) and makes the
# script exit 1 after the remaining targets ran.
set -uo pipefail

secs="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
export RUSTC_BOOTSTRAP="${RUSTC_BOOTSTRAP:-1}"
targets="${TARGETS:-push_request cursor token config}"
work="${FUZZ_WORK:-$(mktemp -d -t pushgate-fuzz.XXXXXX)}"

cargo fuzz build || exit 2

failed=()
summary=()
for target in $targets; do
    mkdir -p "$work/$target" "artifacts/$target"
    log="$work/$target.log"
    echo "== $target: ${secs}s (scratch corpus $work/$target)"
    cargo fuzz run "$target" "$work/$target" "corpus/$target" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"$log" 2>&1
    status=$?
    runs="$(grep -Eo 'Done [0-9]+ runs' "$log" | grep -Eo '[0-9]+' | tail -1)"
    if [ -z "$runs" ]; then
        runs="$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)"
    fi
    corpus="$(find "$work/$target" -type f | wc -l)"
    if [ "$status" -ne 0 ]; then
        failed+=("$target")
        summary+=("$target: CRASH (exit $status) after ${runs:-?} runs; see $log and fuzz/artifacts/$target/")
        tail -40 "$log"
    else
        summary+=("$target: ${runs:-?} runs in ${secs}s, 0 crashes, $corpus new corpus entries")
    fi
done

echo
echo "== fuzz summary"
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -ne 0 ]; then
    echo "crashed: ${failed[*]}"
    exit 1
fi
