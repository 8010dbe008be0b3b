#!/usr/bin/env bash
# Installs nginx with the Nchan module from Debian (nginx-light,
# libnginx-mod-nchan). Idempotent: does nothing when both are installed,
# runs `apt-get update` only when a package cannot be found otherwise.
# The distribution's own nginx service is not started or enabled here
# (start.sh runs a private instance on 127.0.0.1 with its own prefix).
set -euo pipefail

packages=(nginx-light libnginx-mod-nchan)

installed() {
    local p
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || return 1
    done
}

if installed; then
    echo "setup: ${packages[*]} already installed"
else
    sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    # Keep the packaged service from starting on install (containers have
    # no init anyway; elsewhere this leaves port 80 alone).
    policy=/usr/sbin/policy-rc.d
    own_policy=no
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
        "${sudo[@]}" chmod +x "$policy"
        own_policy=yes
    fi
    trap '[[ $own_policy == yes ]] && "${sudo[@]}" rm -f "$policy"' EXIT
    if ! apt-cache show "${packages[@]}" >/dev/null 2>&1; then
        "${sudo[@]}" apt-get update
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"
fi

nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
"$nginx_bin" -v 2>&1
module=$(ls /usr/lib/nginx/modules/ngx_nchan_module.so 2>/dev/null || true)
[[ -n "$module" ]] || { echo "setup: ngx_nchan_module.so not found" >&2; exit 1; }
echo "setup: nchan module at $module"
