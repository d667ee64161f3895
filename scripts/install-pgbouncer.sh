#!/usr/bin/env bash
# Install pgbouncer from Debian when it is absent (the tests run their own instance on a free
# port with their own ini; the system one the package may start is not used).
exec "$(dirname "$0")/install-debian-package.sh" pgbouncer pgbouncer /usr/sbin/pgbouncer
