#!/usr/bin/env bash
# Runs all the tests, installing and starting what they need first (Debian): one command on a
# fresh machine. Extra arguments go to `go test` (e.g. -run Foo, -short, -v).
#
#   scripts/test.sh [go test args...]
#
# Services: Redis on 127.0.0.1:6379, PostgreSQL on 127.0.0.1:5432 (trust auth) and a 3-node
# Redis Cluster (scripts/redis-cluster.sh) are detected, and installed/started only when absent;
# so are Chromium and nginx (installed only: the tests start their own).
# A TEST_* URL already set by the caller is used as is, and its service is left to the caller.
#
#   TEST_REDIS_URL          default redis://127.0.0.1:6379
#   TEST_DATABASE_URL       default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
#   TEST_REDIS_CLUSTER_URL  default the url of scripts/redis-cluster.sh
#   WAITROOM_BROWSER_TESTS  0 = do not install Chromium (default: install when missing)
#   WAITROOM_KEEP_CLUSTER   1 = leave a cluster started by this run running (default: stop it)
#   CI                      true = tests fail instead of skipping when a service is missing
#
# Exit code: go test's; if go test passes but go vet failed, go vet's.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/services.sh
source scripts/services.sh

ensure_go
ensure_cc

if [ -z "${TEST_REDIS_URL:-}" ]; then
	ensure_redis
	export TEST_REDIS_URL=redis://127.0.0.1:6379
fi
if [ -z "${TEST_DATABASE_URL:-}" ]; then
	ensure_postgres
	export TEST_DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'
fi
if [ "${WAITROOM_BROWSER_TESTS:-1}" != 0 ]; then
	ensure_chromium
fi
# Debian's nginx, for the forward-auth test of deploy/nginx (internal/gateway TestNginx).
ensure_nginx

if [ -z "${TEST_REDIS_CLUSTER_URL:-}" ]; then
	if ! bash scripts/redis-cluster.sh status; then
		bash scripts/redis-cluster.sh start
		if [ "${WAITROOM_KEEP_CLUSTER:-0}" != 1 ]; then
			# Started by this run: stopped at the end, even on failure or interrupt.
			trap 'bash scripts/redis-cluster.sh stop || true' EXIT
		fi
	fi
	TEST_REDIS_CLUSTER_URL=$(bash scripts/redis-cluster.sh url)
	export TEST_REDIS_CLUSTER_URL
fi

vet_rc=0
go vet ./... || vet_rc=$?
if [ "$vet_rc" -ne 0 ]; then
	echo "test.sh: go vet ./... FAILED (exit $vet_rc); running the tests anyway" >&2
fi

test_rc=0
go test -race -count=1 -timeout 25m ./... "$@" || test_rc=$?

if [ "$test_rc" -ne 0 ]; then
	echo "test.sh: go test FAILED (exit $test_rc)" >&2
	exit "$test_rc"
fi
if [ "$vet_rc" -ne 0 ]; then
	echo "test.sh: tests passed but go vet failed" >&2
	exit "$vet_rc"
fi
