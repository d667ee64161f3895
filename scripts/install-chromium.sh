#!/usr/bin/env bash
# Install Debian's Chromium for the console's browser tests when it is absent (Playwright drives
# it; no browser is ever downloaded by Playwright itself).
exec "$(dirname "$0")/install-debian-package.sh" chromium /usr/bin/chromium
