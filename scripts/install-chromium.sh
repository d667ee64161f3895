#!/usr/bin/env bash
# Install Debian's Chromium for the console's browser tests when it is absent (Playwright drives
# it; no browser is ever downloaded by Playwright itself). Idempotent: exits 0 at once if
# /usr/bin/chromium exists. Needs root or passwordless sudo, and Debian's mirrors.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
    exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        as_root=(sudo -n)
    else
        echo "install-chromium: chromium is absent and we are neither root nor allowed" \
            "passwordless sudo; install it by hand (apt-get install chromium)" >&2
        exit 1
    fi
fi

"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends chromium >/dev/null

if [ -x /usr/bin/chromium ]; then
    exit 0
fi
echo "install-chromium: apt-get finished but /usr/bin/chromium is missing" >&2
exit 1
