#!/usr/bin/env bash
# Stops the nginx started by start.sh from PREFIX: the master named in
# PREFIX/nginx.pid and its worker processes (its children), by pid, never
# by name: SIGTERM (nginx's fast shutdown: open WebSockets would hold a
# graceful one), then SIGKILL after 5 s, to the master and to any worker
# left behind.
#
# Usage: stop.sh PREFIX [--remove]   (--remove: then delete PREFIX, if under /tmp)
set -euo pipefail
prefix=${1:?usage: stop.sh PREFIX [--remove]}
prefix=${prefix%/}
pidfile=$prefix/nginx.pid

children_of() {
    local stat
    for stat in /proc/[0-9]*/stat; do
        # Field 4 is the parent pid; the name (field 2) may hold spaces.
        local line rest
        line=$(cat "$stat" 2>/dev/null) || continue
        rest=${line##*) }
        set -- $rest
        if [[ ${2:-} == "$pid" ]]; then
            local child=${stat#/proc/}
            echo "${child%/stat}"
        fi
    done
}

alive() {
    local p
    for p in "$@"; do
        kill -0 "$p" 2>/dev/null && return 0
    done
    return 1
}

if [[ ! -s $pidfile ]]; then
    echo "stop: no pid file in $prefix (not running?)" >&2
else
    pid=$(cat "$pidfile")
    # Only an nginx master whose command line names this prefix's config.
    if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$prefix/nginx.conf"; then
        workers=$(children_of)
        # shellcheck disable=SC2086
        procs=("$pid" $workers)
        for sig in TERM KILL; do
            kill -"$sig" "${procs[@]}" 2>/dev/null || true
            for _ in $(seq 1 50); do
                alive "${procs[@]}" || break
                sleep 0.1
            done
            alive "${procs[@]}" || break
        done
        if alive "${procs[@]}"; then
            echo "stop: some of ${procs[*]} still alive" >&2
            exit 1
        fi
        rm -f "$pidfile"
    else
        echo "stop: pid $pid is not this prefix's nginx (already gone?)" >&2
    fi
fi
if [[ ${2:-} == --remove && $prefix == /tmp/?* ]]; then
    rm -rf "$prefix"
fi
