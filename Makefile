# Waitroom. `make` lists the targets; `make test` is the one command that runs every test.

.DEFAULT_GOAL := help
SHELL := /bin/bash
# Go from the PATH, or where the official tarball puts it.
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
# The targets build, run and bench the service module on its own go.mod, as the image does; the
# go.work that joins it with deploy/ (the deployment checks, a module of their own) is for
# editors and ad-hoc commands. `make test` runs both modules (scripts/test.sh).
export GOWORK := off
# Extra arguments for go test, e.g. make test ARGS='-run TestFoo -v'
ARGS ?=

.PHONY: help test test-short run build bench bench-targets cluster-start cluster-stop

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

test: ## install/start what the tests need (Debian) and run go vet + all tests (both modules) with -race
	bash scripts/test.sh $(ARGS)

test-short: ## same as test, with -short
	bash scripts/test.sh -short $(ARGS)

run: ## run the server locally (SIGTERM or Ctrl-C to make stops it gracefully)
	$(GO) build -o bin/waitroom ./cmd/waitroom
	exec bin/waitroom serve

build: ## build bin/waitroom
	$(GO) build -o bin/waitroom ./cmd/waitroom

bench: ## run the benchmarks (no tests)
	$(GO) test -run '^$$' -bench . ./...

bench-targets: ## waitroom bench: every performance target against its same-run baseline (local Redis)
	bash scripts/bench.sh $(ARGS)

cluster-start: ## start the local 3-node Redis Cluster used by the tests (reused if healthy)
	bash scripts/redis-cluster.sh start

cluster-stop: ## stop the local Redis Cluster and remove its files
	bash scripts/redis-cluster.sh stop
