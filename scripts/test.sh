#!/usr/bin/env bash
# Runs all the tests, installing and starting what they need first (Debian): one command on a
# fresh machine: go vet, go test -race of every package of both Go modules (the service at the
# root, and deploy/: the offline checks of the deployment files), then the short experiment of
# admission mode auto once more without the race detector, with its full criteria (about
# two minutes), and the fault-injection suite's short form (`waitroom chaos --short`: its
# own redis-server on a private port, its own database; about 4 minutes). Extra arguments go to
# `go test` in each module (e.g. -run Foo, -short, -v); with them neither of the last two runs
# unless WAITROOM_CHAOS=1.
#
# Each module is vetted, tested and built on its own go.mod (GOWORK=off), not through the
# go.work that joins them for development: the root's graph alone is what the image builds and
# what users of the gate package get, deploy/go.mod must hold up alone too, and a run leaves no
# go.work.sum behind. (In the workspace, `go test ./...` at the root would not reach deploy/
# anyway: `./...` stops at a nested module; `go test work` runs both.)
#
#   scripts/test.sh [go test args...]
#
# Services: Redis on 127.0.0.1:6379, PostgreSQL on 127.0.0.1:5432 (trust auth) and a 3-node
# Redis Cluster (scripts/redis-cluster.sh) are detected, and installed/started only when absent;
# so are Chromium (with CJK fonts for the page's languages) and nginx (installed only: the tests
# start their own).
# A TEST_* URL already set by the caller is used as is, and its service is left to the caller.
#
#   TEST_REDIS_URL          default redis://127.0.0.1:6379
#   TEST_DATABASE_URL       default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
#   TEST_REDIS_CLUSTER_URL  default the url of scripts/redis-cluster.sh
#   WAITROOM_BROWSER_TESTS  0 = do not install Chromium (default: install when missing)
#   WAITROOM_KEEP_CLUSTER   1 = leave a cluster started by this run running (default: stop it)
#   WAITROOM_CHAOS          0 = skip the chaos suite, 1 = run it even with go test arguments
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
# Debian's nginx, for the tests that run the shipped nginx configurations: deploy/nginx's forward
# auth (internal/gateway TestNginx) and deploy/compose's balancer (internal/cli TestComposeNginxCrowd).
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

export GOWORK=off
modules=(. deploy)

vet_rc=0
for m in "${modules[@]}"; do
	rc=0
	(cd "$m" && go vet ./...) || rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "test.sh: go vet ./... in $m FAILED (exit $rc); running the tests anyway" >&2
		[ "$vet_rc" -eq 0 ] && vet_rc=$rc
	fi
done

test_rc=0
for m in "${modules[@]}"; do
	rc=0
	(cd "$m" && go test -race -count=1 -timeout 25m ./... "$@") || rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "test.sh: go test in $m FAILED (exit $rc)" >&2
		[ "$test_rc" -eq 0 ] && test_rc=$rc
	fi
done

if [ "$test_rc" -ne 0 ]; then
	exit "$test_rc"
fi

chaos=${WAITROOM_CHAOS:-}
if [ -z "$chaos" ]; then
	chaos=1
	[ "$#" -gt 0 ] && chaos=0
fi
if [ "$chaos" = 1 ]; then
	# The short experiment of admission mode auto with the issue's criteria (p95 under the
	# target once settled, back under it within 20 s of a halving): without the race detector,
	# which stalls its one-process harness for seconds on 2 cores, and alone (internal/autoexp).
	auto_rc=0
	go test -count=1 -run '^TestControllerFollowsTheOrigin$' ./internal/autoexp/ || auto_rc=$?
	if [ "$auto_rc" -ne 0 ]; then
		echo "test.sh: the auto admission experiment's criteria FAILED (exit $auto_rc)" >&2
		exit "$auto_rc"
	fi
	# After go test, not beside it: the suite measures recovery times.
	ensure_redis_binaries
	bin=$(mktemp -d "${TMPDIR:-/tmp}/waitroom-test.XXXXXX")
	go build -o "$bin/waitroom" ./cmd/waitroom
	chaos_rc=0
	"$bin/waitroom" chaos --short --quiet --postgres "$TEST_DATABASE_URL" || chaos_rc=$?
	rm -rf "$bin"
	if [ "$chaos_rc" -ne 0 ]; then
		echo "test.sh: waitroom chaos --short FAILED (exit $chaos_rc)" >&2
		exit "$chaos_rc"
	fi
fi
if [ "$vet_rc" -ne 0 ]; then
	echo "test.sh: tests passed but go vet failed" >&2
	exit "$vet_rc"
fi
