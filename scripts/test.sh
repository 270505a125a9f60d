#!/usr/bin/env bash
# scripts/test.sh: the project's test command.
#
# Runs every test under the race detector against real redis-server and
# PostgreSQL processes that the tests start themselves. The race detector
# and the SQLite driver need cgo, so a C compiler is required too. The
# dashboard and the matrix report are tested in a real headless Chromium.
#
# On Debian/Ubuntu it installs redis-server, postgresql, chromium and gcc
# with apt-get when they are missing. On macOS the C compiler comes with
# the Xcode command line tools (xcode-select --install); with Homebrew it
# installs redis, postgresql@16 and the chromium cask when missing (Google
# Chrome in /Applications will do), and points the tests at Homebrew's
# PostgreSQL, which is not on PATH (PG_BINDIR). Elsewhere it says what to
# install.
set -euo pipefail
cd "$(dirname "$0")/.."

# macOS's app bundles, where internal/testinfra/browsertest looks too.
mac_browsers=(
	"/Applications/Chromium.app/Contents/MacOS/Chromium"
	"/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"
)
have_chromium() {
	local b
	for b in chromium chromium-browser google-chrome google-chrome-stable; do
		command -v "$b" >/dev/null 2>&1 && return 0
	done
	for b in "${mac_browsers[@]}"; do
		[ -x "$b" ] && return 0
	done
	return 1
}
# Debian keeps initdb and postgres off PATH, in /usr/lib/postgresql/<version>/bin
# (internal/testinfra/pgproc looks there too).
have_postgres() {
	[ -n "${PG_BINDIR:-}" ] && [ -x "$PG_BINDIR/initdb" ] && return 0
	command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ] && return 0
	compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && return 0
	command -v initdb >/dev/null 2>&1
}
# Homebrew's postgresql@N formulas are keg-only: their bin directory is
# found with brew --prefix, which names it whether or not it is installed.
brew_pg_bindir() {
	local f d
	for f in postgresql@17 postgresql@16 postgresql@15 postgresql@14 postgresql; do
		d="$(brew --prefix "$f" 2>/dev/null)/bin"
		if [ -x "$d/initdb" ] && [ -x "$d/postgres" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

if [ "$(uname -s)" = Darwin ]; then
	if ! xcode-select -p >/dev/null 2>&1; then
		echo "test.sh: no C compiler, which the race detector and the SQLite driver need: install the Xcode command line tools (xcode-select --install) and run this again" >&2
		exit 1
	fi
	if command -v brew >/dev/null 2>&1; then
		if ! command -v redis-server >/dev/null 2>&1; then
			echo "test.sh: installing redis with Homebrew" >&2
			brew install redis >/dev/null
		fi
		if ! have_postgres && ! brew_pg_bindir >/dev/null; then
			echo "test.sh: installing postgresql@16 with Homebrew" >&2
			brew install postgresql@16 >/dev/null
		fi
		if ! have_postgres && d=$(brew_pg_bindir); then
			export PG_BINDIR="$d"
		fi
		if ! have_chromium; then
			echo "test.sh: installing the chromium cask with Homebrew" >&2
			brew install --cask chromium >/dev/null
		fi
	fi
	need=()
	command -v redis-server >/dev/null 2>&1 || need+=(redis)
	have_postgres || need+=(postgresql@16)
	have_chromium || need+=(chromium)
	if [ ${#need[@]} -gt 0 ]; then
		echo "test.sh: missing ${need[*]}. Install them and run this again:" >&2
		echo "  brew install redis postgresql@16 && brew install --cask chromium   (or Google Chrome, in /Applications)" >&2
		exit 1
	fi
else
	need=()
	command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
	command -v gcc >/dev/null 2>&1 || need+=(gcc)
	have_chromium || need+=(chromium)
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
			echo "  macOS:         brew install redis postgresql@16 && brew install --cask chromium (the C compiler comes with the Xcode command line tools)" >&2
			exit 1
		fi
	fi
fi

# The tests start their own redis-server and postgres processes on free
# ports; a system service on 6379 or 5432 (if a package started one) is
# neither needed nor touched.
#
# Every package, as ./... names them, the longest first (they take 30 s
# to 3 min each; the others a few seconds): go test runs the packages in
# the order given, as many at a time as there are CPUs, so the short ones
# fill in beside the long ones at the end, rather than lock and store,
# last in alphabetical order, running alone.
long="./internal/demo ./internal/faulttest ./lock ./internal/app ./internal/dashboard ./internal/seckill ./loadtest ./store"
# shellcheck disable=SC2086 # $long is a list of packages
exec go test -race -count=1 $long ./...
