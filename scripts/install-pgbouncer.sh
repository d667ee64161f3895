#!/usr/bin/env bash
# Install pgbouncer from Debian when it is absent. Idempotent: exits 0 at once if the binary is
# already on PATH (or in /usr/sbin). Needs root (the tests run as root here and in CI).
set -euo pipefail

if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-pgbouncer: pgbouncer is absent and we are not root; install it by hand" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null

# The Debian package starts a system pgbouncer on port 6432 where a service manager exists; the
# tests run their own instance on a free port with their own ini, so that one is not needed.
if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
    exit 0
fi
echo "install-pgbouncer: apt-get finished but no pgbouncer binary was found" >&2
exit 1
