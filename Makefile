# Herald: `make run` brings everything up locally; `make test` runs the whole test suite.
# Both need nothing installed by hand: scripts/db.sh installs PostgreSQL when it is missing.

SWIFT ?= swift
RELEASE_PATH ?= .build-release
DB_ENV := .data/postgres.env

.PHONY: help build docs test chaos run bench bench-queue bench-pickup bench-hub bench-api bench-send bench-webhooks bench-lanes bench-pressure bench-stats release-products lint format migrate db-up db-down clean

help:
	@echo "make run         start PostgreSQL, migrate, nh-emulator, herald-api, herald-worker (Ctrl-C stops all)"
	@echo "make test        start PostgreSQL, build every product, run every test (also through PgBouncer, and the ops reads on a streaming replica), the deploy checks, the reduced pressure pass and the reduced fault harness"
	@echo "make chaos       the fault harness at full size (kill -9, PostgreSQL restart, hub fault storm, partitions, ...)"
	@echo "make bench       every benchmark (release build); bench-queue, bench-pickup, bench-hub, bench-api, bench-send, bench-webhooks, bench-lanes, bench-stats for subsets"
	@echo "make bench-pressure  the queue and the send pipeline under a held XID, readers, overload and chaos (about an hour; not in make bench)"
	@echo "make lint        swift-format lint with the checked-in .swift-format"
	@echo "make docs        rewrite docs/configuration.md from the Setting declarations (a test checks it)"
	@echo "make migrate     apply migrations to the local database"
	@echo "make db-up/db-down  start/stop the local PostgreSQL cluster in .data/"

db-up:
	@scripts/db.sh up

db-down:
	@scripts/db.sh down

build:
	$(SWIFT) build

# docs/configuration.md is printed by Tools/herald-docs from the `Setting` declarations;
# ConfigurationTableTests fails when the committed file differs.
docs:
	$(SWIFT) build --product herald-docs
	"$$($(SWIFT) build --show-bin-path)/herald-docs" > docs/configuration.md.tmp
	mv docs/configuration.md.tmp docs/configuration.md

# db-up, then build every product (tests start the executables as child processes), then
# scripts/test.sh: the Swift tests; the end-to-end send and registration suites again through a
# PgBouncer in transaction mode with three workers; the ops reads on a streaming replica; the deploy files' checks; the dashboard in a
# real browser; the fault harness at its reduced size (it restarts the cluster, so it runs last).
# `make test` fails when any of them fails, and its last lines name which.
# At most this many tests run at once. Unbounded, the suites (many start real processes) ran all at
# once on a 2-core machine and the slowest waited past their timeouts; 8 finished sooner too.
TEST_PARALLELISM ?= 8
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH := $(TEST_PARALLELISM)

test: db-up
	@scripts/test-tools.sh
	$(SWIFT) build --build-tests
	@scripts/test.sh "$$($(SWIFT) build --show-bin-path)"

# The fault harness at full size (scripts/chaos/chaos.py): one line per scenario.
chaos: db-up
	$(SWIFT) build
	@scripts/chaos.sh "$$($(SWIFT) build --show-bin-path)" full

migrate: db-up build
	@set -a; . ./$(DB_ENV); set +a; "$$($(SWIFT) build --show-bin-path)/heraldctl" migrate

run: db-up build
	@scripts/run.sh "$$($(SWIFT) build --show-bin-path)"

# Every benchmark in one run, then the figures with a target against it (scripts/bench.sh);
# BENCH_BASELINE_BIN=DIR runs them first on an older build's release executables, for a before/after.
# The output is kept in .data/bench/latest.txt; BENCH_UPDATE_DOCS=1 writes it into docs/benchmarks.md.
bench: db-up release-products
	@scripts/bench.sh "$(RELEASE_PATH)/release"

bench-queue: db-up
	$(SWIFT) build -c release --scratch-path $(RELEASE_PATH) --product herald-bench
	@set -a; . ./$(DB_ENV); set +a; "$(RELEASE_PATH)/release/herald-bench" queue

# The queue's pickup latency alone (enqueue start -> handler start at 1,000 jobs/s).
bench-pickup: db-up
	$(SWIFT) build -c release --scratch-path $(RELEASE_PATH) --product herald-bench
	@set -a; . ./$(DB_ENV); set +a; "$(RELEASE_PATH)/release/herald-bench" queue --pickup-only

# GET /v1/stats latency (p95 per window and the worst) on a database seeded with 1 M notifications
# and 3 M outcome rows (herald_bench_stats on the local cluster, reused while its row counts match).
bench-stats: db-up
	$(SWIFT) build -c release --scratch-path $(RELEASE_PATH) --product herald-api
	$(SWIFT) build -c release --scratch-path $(RELEASE_PATH) --product herald-bench
	@set -a; . ./$(DB_ENV); set +a; "$(RELEASE_PATH)/release/herald-bench" stats

bench-hub:
	$(SWIFT) build -c release --scratch-path $(RELEASE_PATH) --product herald-bench
	"$(RELEASE_PATH)/release/herald-bench" hub

# Release builds of the executables the load benchmarks start.
release-products:
	$(SWIFT) build -c release --scratch-path $(RELEASE_PATH) --product herald-api
	$(SWIFT) build -c release --scratch-path $(RELEASE_PATH) --product herald-worker
	$(SWIFT) build -c release --scratch-path $(RELEASE_PATH) --product heraldctl
	$(SWIFT) build -c release --scratch-path $(RELEASE_PATH) --product nh-emulator
	$(SWIFT) build -c release --scratch-path $(RELEASE_PATH) --product herald-bench

# wrk (installed when missing) drives the load.
bench-api: db-up release-products
	@scripts/bench-api.sh "$(RELEASE_PATH)/release"

# The send pipeline: batch accept, end to end through the worker, latency (scripts/bench-send.sh).
bench-send: db-up release-products
	@scripts/bench-send.sh "$(RELEASE_PATH)/release"

# Webhook delivery against the send pipeline in the same run: send.e2e, then webhooks.e2e and the
# state change -> delivery latency at 1,000/s offered (scripts/bench-send.sh, its webhook phases).
bench-webhooks: db-up release-products
	@BENCH_SEND_PHASES=webhooks scripts/bench-send.sh "$(RELEASE_PATH)/release"

# Fairness: another key's single sends while a campaign's and a batch backlog drain, with the
# queue's lanes off (before) and on (after) in one run (scripts/bench-lanes.sh).
bench-lanes: db-up release-products
	@scripts/bench-lanes.sh "$(RELEASE_PATH)/release"

# The queue alone and the send pipeline under pressure (held XID, repeatable-read readers, 1.5x
# overload) and chaos (backend kills, idle connections, a full server, PostgreSQL restart, worker
# SIGKILL); scripts/bench-pressure.py lists its phases and knobs. About 65 minutes, so not part of
# `make bench`; BENCH_PRESSURE_SCALE=0.1 shortens every phase.
bench-pressure: db-up release-products
	@scripts/bench-pressure.sh "$(RELEASE_PATH)/release"

lint:
	$(SWIFT) format lint --recursive --parallel Package.swift Sources Tests Benchmarks Plugins Tools

format:
	$(SWIFT) format format --in-place --recursive --parallel Package.swift Sources Tests Benchmarks Plugins Tools

clean:
	rm -rf .build $(RELEASE_PATH)
