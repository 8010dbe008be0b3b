#!/usr/bin/env bash
# Starts a private nginx + Nchan on 127.0.0.1 for loadtest.
#
# Usage: start.sh [PREFIX]   (default: a new directory /tmp/nchan-loadtest.XXXXXX)
# Prints three lines: `prefix <dir>`, `port <port>`, `pid <master pid>`.
# Stop it with stop.sh <dir> (by its pid file, never by name).
# NCHAN_PORT chooses the port (default: a free one); NGINX_BIN the nginx
# binary (default: nginx on PATH), NCHAN_MODULE the module's .so. (Not
# NGINX: nginx itself reads that variable as a list of inherited sockets.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nginx_bin=${NGINX_BIN:-$(command -v nginx || echo /usr/sbin/nginx)}
module=${NCHAN_MODULE:-/usr/lib/nginx/modules/ngx_nchan_module.so}
[[ -x $nginx_bin && -f $module ]] || { echo "start: nginx or the Nchan module is missing; run $here/setup.sh" >&2; exit 1; }

if [[ -n ${1:-} ]]; then
    prefix=$1
else
    prefix=$(mktemp -d /tmp/nchan-loadtest.XXXXXX)
    # Ours: removed again if the server does not come up.
    trap '[[ -n ${started:-} ]] || rm -rf "$prefix"' EXIT
fi
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
if [[ -s $prefix/nginx.pid ]] && kill -0 "$(cat "$prefix/nginx.pid")" 2>/dev/null; then
    echo "start: an nginx already runs from $prefix (pid $(cat "$prefix/nginx.pid"))" >&2
    exit 1
fi
# Workers run as nobody: they must reach the prefix (temp dirs, logs).
chmod 755 "$prefix"

free_port() {
    # A port the kernel hands out for 127.0.0.1:0 is free right now.
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null && return
    local p
    for p in $(seq 20000 20999); do
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return
        fi
    done
    return 1
}
port=${NCHAN_PORT:-$(free_port)}

sed -e "s#@PREFIX@#$prefix#g" -e "s#@PORT@#$port#g" -e "s#@MODULE@#$module#g" \
    "$here/nchan.conf.template" >"$prefix/nginx.conf"
"$nginx_bin" -t -q -c "$prefix/nginx.conf" -p "$prefix" -e "$prefix/error.log" 2>&1 | grep -v '^$' >&2 || true
# The master stays in the foreground (daemon off) as our background job:
# it keeps the caller's process group, so an interrupt of the caller
# (Ctrl-C on loadtest compare) reaches it too (nginx: fast shutdown).
# Its output goes to files, never to our stdout (whoever reads this
# script's output would wait for it).
"$nginx_bin" -c "$prefix/nginx.conf" -p "$prefix" -e "$prefix/error.log" \
    </dev/null >/dev/null 2>"$prefix/start.err" &
master=$!

# Whether GET /status answers 200 (at most 2 s).
answers() {
    timeout 2 bash -c '
        exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf "GET /status HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3
        head -c 12 <&3' _ "$1" 2>/dev/null | grep -q ' 200'
}

# Wait (at most ~10 s) until it answers.
pid=""
for _ in $(seq 1 50); do
    if ! kill -0 "$master" 2>/dev/null; then
        cat "$prefix/start.err" >&2
        echo "start: nginx exited (see $prefix/error.log)" >&2
        exit 1
    fi
    [[ -s $prefix/nginx.pid ]] && pid=$(cat "$prefix/nginx.pid")
    if [[ $pid == "$master" ]] && answers "$port"; then
        started=yes
        echo "prefix $prefix"
        echo "port $port"
        echo "pid $pid"
        exit 0
    fi
    sleep 0.2
done
echo "start: nginx did not answer on 127.0.0.1:$port (see $prefix/error.log)" >&2
kill -TERM "$master" 2>/dev/null || true
exit 1
