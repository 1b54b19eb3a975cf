#!/usr/bin/env bash
# Runs the performance targets of issue 5 on this machine: builds waitroom and runs
# `waitroom bench`, which measures each target against a baseline in the same run (Redis
# scripts under redis-benchmark, the seed's Lua designs, a bare net/http handler) and prints
# one line per target: the figure, the baseline, the ratio, and HOLDS or NOT MET.
#
#   scripts/bench.sh [waitroom bench flags...]     e.g. --only join,admit   or   --quick
#
# Needs (installed and started when absent, as for the tests): Redis on 127.0.0.1:6379 with
# redis-benchmark, PostgreSQL on 127.0.0.1:5432 (trust auth). WAITROOM_REDIS_URL and
# WAITROOM_DATABASE_URL point it elsewhere. Everything it creates is removed at the end.
# Exit code: 0 when every target holds, 1 when one does not.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The service module on its own go.mod, as the image builds it (not through go.work).
export GOWORK=off
# shellcheck source=scripts/services.sh
source scripts/services.sh

ensure_go
if [ -z "${WAITROOM_REDIS_URL:-}" ]; then
	ensure_redis
fi
if ! command -v redis-benchmark >/dev/null 2>&1; then
	_svc_apt_install redis-tools
fi
if [ -z "${WAITROOM_DATABASE_URL:-}" ]; then
	ensure_postgres
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/waitroom-bench.XXXXXX")
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/waitroom" ./cmd/waitroom
"$dir/waitroom" bench "$@"
