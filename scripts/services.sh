#!/usr/bin/env bash
# Installs (Debian, apt-get) and starts the services the tests need, only when they are absent.
#
# Source it and call the functions:
#   source scripts/services.sh
#   ensure_go && ensure_cc && ensure_redis && ensure_postgres && ensure_chromium && ensure_nginx
# or run one directly:  bash scripts/services.sh ensure_redis [ensure_postgres ...]
#
# Every function is idempotent, prints nothing when all is well, and prints what failed (with
# the captured output of the failing command) to stderr and returns non-zero otherwise.
# Installing prints one line per package set, since it takes a while.
#
# Settings (environment):
#   WAITROOM_REDIS_PORT     port of the test Redis on 127.0.0.1   (default 6379)
#   WAITROOM_PG_PORT        port of the test PostgreSQL on 127.0.0.1 (default 5432)
#   WAITROOM_PG_CLUSTER     Debian cluster name to create/start when absent (default main)
#   WAITROOM_WAIT_SECONDS   how long to wait for a started service (default 30)

# Functions starting with _svc_ are private; only the ensure_* functions are meant to be called.

_svc_err() { printf 'services.sh: %s\n' "$*" >&2; }

# _svc_sudo runs a command as root: directly when we are root, else through sudo.
_svc_sudo() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		_svc_err "need root to run: $* (and sudo is not installed)"
		return 1
	fi
}

# _svc_quiet DESCRIPTION CMD...: runs CMD with its output captured; on failure prints
# DESCRIPTION, the exit code and the output.
_svc_quiet() {
	local desc=$1 out rc
	shift
	out=$(mktemp "${TMPDIR:-/tmp}/waitroom-services.XXXXXX") || return 1
	if "$@" >"$out" 2>&1; then
		rm -f "$out"
		return 0
	else
		rc=$?
	fi
	_svc_err "FAILED ($rc): $desc"
	_svc_err "command: $*"
	sed 's/^/    /' "$out" >&2
	rm -f "$out"
	return "$rc"
}

_SVC_APT_UPDATED=${_SVC_APT_UPDATED:-0}

# _svc_apt_install PKG...: apt-get update (once per shell) and install.
_svc_apt_install() {
	if ! command -v apt-get >/dev/null 2>&1; then
		_svc_err "apt-get not found: install $* by hand (this script supports Debian/Ubuntu)"
		return 1
	fi
	printf 'services.sh: installing %s (apt-get, once)...\n' "$*" >&2
	if [ "$_SVC_APT_UPDATED" != 1 ]; then
		_svc_quiet "apt-get update" _svc_sudo env DEBIAN_FRONTEND=noninteractive apt-get update || return 1
		_SVC_APT_UPDATED=1
	fi
	_svc_quiet "apt-get install $*" _svc_sudo env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y --no-install-recommends "$@"
}

# _svc_wait SECONDS CMD...: polls CMD every 0.1 s until it succeeds or SECONDS have passed.
_svc_wait() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			return 1
		fi
		sleep 0.1
	done
}

# _svc_tcp_open PORT: is something listening on 127.0.0.1:PORT?
_svc_tcp_open() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# _svc_redis_ping PORT: does a Redis on 127.0.0.1:PORT answer PONG?
_svc_redis_ping() {
	local port=$1 reply
	if command -v redis-cli >/dev/null 2>&1; then
		reply=$(timeout 3 redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null) || return 1
	else
		# shellcheck disable=SC2016 # $1 is expanded by the inner bash
		reply=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
			printf "PING\r\n" >&3; IFS= read -r line <&3; printf "%s" "$line"' _ "$port" 2>/dev/null) || return 1
	fi
	[[ $reply == *PONG* ]]
}

# ensure_go: go on PATH (adding /usr/local/go/bin if needed), or a clear error.
ensure_go() {
	if command -v go >/dev/null 2>&1; then
		return 0
	fi
	if [ -x /usr/local/go/bin/go ]; then
		export PATH="/usr/local/go/bin:$PATH"
		return 0
	fi
	_svc_err "Go is not installed (not on PATH, not in /usr/local/go/bin)."
	_svc_err "Install the Go version named in go.mod from https://go.dev/dl/, e.g.:"
	_svc_err "  curl -fsSL https://go.dev/dl/go1.26.0.linux-amd64.tar.gz | sudo tar -C /usr/local -xz"
	return 1
}

# ensure_cc: a C toolchain, which `go test -race` needs (cgo).
ensure_cc() {
	if command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1; then
		return 0
	fi
	_svc_apt_install gcc libc6-dev
}

# ensure_redis_binaries: redis-server and redis-cli installed (does not start anything).
ensure_redis_binaries() {
	if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
		return 0
	fi
	_svc_apt_install redis-server redis-tools
}

# ensure_redis: a Redis answering on 127.0.0.1:$WAITROOM_REDIS_PORT (default 6379); started
# without persistence when absent.
ensure_redis() {
	local port=${WAITROOM_REDIS_PORT:-6379} wait=${WAITROOM_WAIT_SECONDS:-30}
	if _svc_redis_ping "$port"; then
		return 0
	fi
	if _svc_tcp_open "$port"; then
		_svc_err "something listens on 127.0.0.1:$port but does not answer Redis PING; free the port or set TEST_REDIS_URL"
		return 1
	fi
	ensure_redis_binaries || return 1
	# The package's own service may have started it during installation.
	if _svc_redis_ping "$port"; then
		return 0
	fi
	_svc_quiet "start redis-server on 127.0.0.1:$port" \
		redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no || return 1
	if ! _svc_wait "$wait" _svc_redis_ping "$port"; then
		_svc_err "redis-server on 127.0.0.1:$port did not answer PING within ${wait}s"
		return 1
	fi
}

# _svc_pg_ready PORT
_svc_pg_ready() {
	if command -v pg_isready >/dev/null 2>&1; then
		pg_isready -q -h 127.0.0.1 -p "$1" -t 2
	else
		_svc_tcp_open "$1"
	fi
}

# _svc_pg_trusted PORT: can user postgres connect over TCP without a password?
_svc_pg_trusted() {
	PGCONNECT_TIMEOUT=5 psql -w -X -q -h 127.0.0.1 -p "$1" -U postgres -d postgres -Atc 'SELECT 1' >/dev/null 2>&1
}

# _svc_pg_version: the newest PostgreSQL version with a configuration under /etc/postgresql.
_svc_pg_version() {
	local v
	v=$(find /etc/postgresql -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null | sort -V | tail -n 1)
	if [ -z "$v" ]; then
		v=$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null | sort -V | tail -n 1)
	fi
	printf '%s' "$v"
}

# ensure_postgres: a PostgreSQL answering on 127.0.0.1:$WAITROOM_PG_PORT (default 5432) where
# user postgres connects without a password. When absent, PostgreSQL is installed, and the Debian
# cluster $WAITROOM_PG_CLUSTER (default main) is created if missing and started; on a cluster
# installed or started here, loopback connections are set to trust auth if they are not already
# (test machines only). A server that was already running is never reconfigured: if it wants a
# password, this fails with instructions.
ensure_postgres() {
	local port=${WAITROOM_PG_PORT:-5432} wait=${WAITROOM_WAIT_SECONDS:-30} ver hba
	local cluster=${WAITROOM_PG_CLUSTER:-main}
	if _svc_pg_ready "$port"; then
		if command -v psql >/dev/null 2>&1 && ! _svc_pg_trusted "$port"; then
			_svc_err "PostgreSQL on 127.0.0.1:$port refuses user postgres without a password."
			_svc_err "Allow trust auth for 127.0.0.1 in pg_hba.conf, or set TEST_DATABASE_URL to a URL that works."
			return 1
		fi
		return 0
	fi
	if ! command -v pg_ctlcluster >/dev/null 2>&1 || [ -z "$(_svc_pg_version)" ]; then
		_svc_apt_install postgresql postgresql-client || return 1
	fi
	ver=$(_svc_pg_version)
	if [ -z "$ver" ]; then
		_svc_err "PostgreSQL installed but no version found under /etc/postgresql or /usr/lib/postgresql"
		return 1
	fi
	if [ ! -d "/etc/postgresql/$ver/$cluster" ]; then
		_svc_quiet "create PostgreSQL cluster $ver/$cluster on port $port" \
			_svc_sudo pg_createcluster -p "$port" "$ver" "$cluster" || return 1
	fi
	if ! _svc_pg_ready "$port"; then
		_svc_quiet "start PostgreSQL $ver/$cluster" \
			_svc_sudo pg_ctlcluster --skip-systemctl-redirect "$ver" "$cluster" start || return 1
	fi
	if ! _svc_wait "$wait" _svc_pg_ready "$port"; then
		_svc_err "PostgreSQL $ver/$cluster did not accept connections on 127.0.0.1:$port within ${wait}s"
		_svc_err "(check 'port' in /etc/postgresql/$ver/$cluster/postgresql.conf and /var/log/postgresql/)"
		return 1
	fi
	if _svc_pg_trusted "$port"; then
		return 0
	fi
	# Freshly installed Debian clusters use scram/peer auth: allow loopback without password.
	hba="/etc/postgresql/$ver/$cluster/pg_hba.conf"
	if [ ! -f "$hba" ]; then
		_svc_err "cannot connect as postgres without a password, and $hba does not exist"
		return 1
	fi
	_svc_quiet "configure trust auth for loopback in $hba" _svc_sudo sed -i \
		'1i # added by waitroom scripts/services.sh (test machine): loopback without password\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' \
		"$hba" || return 1
	_svc_quiet "reload PostgreSQL $ver/$cluster" \
		_svc_sudo pg_ctlcluster --skip-systemctl-redirect "$ver" "$cluster" reload || return 1
	if ! _svc_wait "$wait" _svc_pg_trusted "$port"; then
		_svc_err "PostgreSQL on 127.0.0.1:$port still refuses user postgres without a password after editing $hba"
		return 1
	fi
}

# ensure_chromium: /usr/bin/chromium, for the browser tests, with fonts for every language
# of the waiting page (ensure_cjk_fonts).
ensure_chromium() {
	if [ ! -x /usr/bin/chromium ]; then
		_svc_apt_install chromium || return 1
	fi
	ensure_cjk_fonts
}

# ensure_cjk_fonts: a font for Japanese, Simplified Chinese and Korean. Without one Chromium
# draws those pages as empty boxes ("tofu"), and TestBrowserPageLanguages fails. Noto Sans CJK
# (fonts-noto-cjk) has all three, with each language's own forms of the shared characters.
ensure_cjk_fonts() {
	local l
	for l in ja zh-cn ko; do
		if ! fc-list ":lang=$l" family 2>/dev/null | grep -q .; then
			_svc_apt_install fontconfig fonts-noto-cjk
			return
		fi
	done
}

# ensure_nginx: /usr/sbin/nginx (Debian's), for the forward-auth test of deploy/nginx.
ensure_nginx() {
	if [ -x /usr/sbin/nginx ]; then
		return 0
	fi
	_svc_apt_install nginx
}

# Run directly: each argument is a function to call.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	if [ "$#" -eq 0 ]; then
		echo "usage: $0 ensure_go|ensure_cc|ensure_redis|ensure_postgres|ensure_chromium|ensure_nginx ..." >&2
		exit 2
	fi
	for fn in "$@"; do
		case $fn in
		ensure_go | ensure_cc | ensure_redis | ensure_redis_binaries | ensure_postgres | ensure_chromium | ensure_cjk_fonts | ensure_nginx) "$fn" ;;
		*)
			echo "unknown function: $fn" >&2
			exit 2
			;;
		esac
	done
fi
