#!/usr/bin/env bash
# Install pgbouncer from Debian when it is absent. Idempotent: exits 0 at once if the binary is
# already on PATH (or in /usr/sbin). Needs root or passwordless sudo, and Debian's mirrors
# (the tests run as root here and in CI).
set -euo pipefail

if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
    exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        as_root=(sudo -n)
    else
        echo "install-pgbouncer: pgbouncer is absent and we are neither root nor allowed" \
            "passwordless sudo; install it by hand (apt-get install pgbouncer)" >&2
        exit 1
    fi
fi

"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null

# The Debian package starts a system pgbouncer on port 6432 where a service manager exists; the
# tests run their own instance on a free port with their own ini, so that one is not needed.
if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
    exit 0
fi
echo "install-pgbouncer: apt-get finished but no pgbouncer binary was found" >&2
exit 1
