#!/usr/bin/env bash
# Runs the fault-injection suite (`waitroom chaos`): builds the binary, makes sure PostgreSQL on
# 127.0.0.1:5432 (trust auth) and the redis-server binary are there (installing/starting them as
# the tests do, via scripts/services.sh), then runs it. Arguments go to `waitroom chaos`.
#
#   scripts/chaos.sh --short                      # every scenario, small crowds, < 5 minutes
#   scripts/chaos.sh --only redis-restart-empty,pg-hang --line-users 1000
#
# The suite starts its own redis-server on a private port (never the shared 6379) and its own
# database on the local PostgreSQL server (dropped at the end). Exit code: the suite's (1 if an
# invariant failed or a scenario did not recover).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The service module on its own go.mod, as the image builds it (not through go.work).
export GOWORK=off
# shellcheck source=scripts/services.sh
source scripts/services.sh

ensure_go
ensure_redis_binaries
ensure_postgres

mkdir -p bin
go build -o bin/waitroom ./cmd/waitroom
exec bin/waitroom chaos "$@"
