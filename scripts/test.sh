#!/usr/bin/env bash
# scripts/test.sh: the project's test command.
#
# Runs every test under the race detector against real redis-server and
# PostgreSQL processes that the tests start themselves. On Debian/Ubuntu it
# installs redis-server and postgresql when they are missing; elsewhere it
# says what to install. The race detector and the SQLite driver need cgo, so
# a C compiler is required too. The dashboard and the matrix report are
# tested in a real headless Chromium (Debian's chromium package), installed
# the same way.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 ||
	command -v google-chrome >/dev/null 2>&1 || need+=(chromium)
# Debian keeps initdb and postgres off PATH, in /usr/lib/postgresql/<version>/bin
# (the tests' PostgreSQL helper looks there too).
have_postgres() {
	[ -n "${PG_BINDIR:-}" ] && [ -x "$PG_BINDIR/initdb" ] && return 0
	command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ] && return 0
	compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && return 0
	command -v initdb >/dev/null 2>&1
}
have_postgres || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	if command -v apt-get >/dev/null 2>&1 && { [ -z "$sudo" ] || command -v sudo >/dev/null 2>&1; }; then
		echo "test.sh: installing ${need[*]} with apt-get" >&2
		$sudo apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${need[@]}" >/dev/null
	else
		echo "test.sh: missing ${need[*]}. Install them and run this again:" >&2
		echo "  Debian/Ubuntu: apt-get install -y redis-server postgresql gcc chromium" >&2
		echo "  Fedora:        dnf install -y redis postgresql-server gcc chromium" >&2
		echo "  macOS:         brew install redis postgresql chromium (gcc comes with the Xcode command line tools)" >&2
		exit 1
	fi
fi

# The tests start their own redis-server and postgres processes on free
# ports; a system service on 6379 or 5432 (if a package started one) is
# neither needed nor touched.
exec go test -race -count=1 ./...
