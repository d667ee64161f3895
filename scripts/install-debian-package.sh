#!/usr/bin/env bash
# install-debian-package.sh PACKAGE BINARY...: install PACKAGE from Debian when none of the
# BINARY names is present (a path that is executable, or a command on PATH). Idempotent: exits
# 0 at once when one is. Needs root or passwordless sudo, and Debian's mirrors.
set -euo pipefail

package=${1:?usage: install-debian-package.sh PACKAGE BINARY...}
shift

present() {
    local binary
    for binary in "$@"; do
        if [ -x "$binary" ] || command -v "$binary" >/dev/null 2>&1; then
            return 0
        fi
    done
    return 1
}

if present "$@"; then
    exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        as_root=(sudo -n)
    else
        echo "install: $package is absent and we are neither root nor allowed passwordless" \
            "sudo; install it by hand (apt-get install $package)" >&2
        exit 1
    fi
fi

"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "$package" >/dev/null

if present "$@"; then
    exit 0
fi
echo "install: apt-get finished but none of $* is there" >&2
exit 1
