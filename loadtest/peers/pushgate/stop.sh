#!/usr/bin/env bash
# Stops the pushgate started by start.sh from PREFIX, by the pid in
# PREFIX/pushgate.pid: SIGTERM (it drains), SIGKILL after 20 s.
#
# Usage: stop.sh PREFIX [--remove]   (--remove: then delete PREFIX, if under /tmp)
set -euo pipefail
prefix=${1:?usage: stop.sh PREFIX [--remove]}
prefix=${prefix%/}
pidfile=$prefix/pushgate.pid
if [[ ! -s $pidfile ]]; then
    echo "stop: no pid file in $prefix (not running?)" >&2
else
    pid=$(cat "$pidfile")
    # Only the process running this prefix's copy of the binary.
    if [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$prefix/pushgate" ]]; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 200); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.2
        fi
        if kill -0 "$pid" 2>/dev/null; then
            echo "stop: pid $pid still alive" >&2
            exit 1
        fi
        rm -f "$pidfile"
    else
        echo "stop: pid $pid is not this prefix's pushgate (already gone?)" >&2
    fi
fi
if [[ ${2:-} == --remove && $prefix == /tmp/?* ]]; then
    rm -rf "$prefix"
fi
