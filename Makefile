# Amphora — top-level commands. `make run` starts a node, `make test` installs and runs
# every test (what CI runs), `make bench*` the benchmarks.
SHELL := /bin/bash
CARGO ?= cargo
DATA_DIR ?= ./data

.PHONY: run build release test test-rust test-compat test-cql test-bench compat-cassandra lint fmt bench bench-quick bench-connection clean

release:
	$(CARGO) build --release -p amphora

run: release
	@echo "Starting Amphora: CQL on 127.0.0.1:9042 (shard-aware 19042), data in $(DATA_DIR)"
	./target/release/amphora server --data-dir $(DATA_DIR)

build:
	$(CARGO) build -p amphora

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test-rust:
	$(CARGO) build -p amphora
	$(CARGO) test --workspace

# Real clients (Python drivers + cqlsh, gocql, Java 4.x, Node) against the debug binary.
test-compat: build
	tests/compat/install.sh
	AMPHORA_BIN=$(CURDIR)/target/debug/amphora tests/compat/run.sh

# CQL golden files (tests/cql/*.cql -> *.result, recorded from Apache Cassandra 5.0.9)
# against a fresh debug amphora; the differences listed in tests/cql/known-differences.txt
# are allowed (docs/dev/testing.md, "CQL golden files").
test-cql: build
	tests/compat/install.sh python
	tests/compat/.venv-datastax/bin/python -m pytest -q -p no:cacheprovider tests/cql/test_run.py
	AMPHORA_BIN=$(CURDIR)/target/debug/amphora tests/cql/run.sh
	AMPHORA_BIN=$(CURDIR)/target/debug/amphora tests/cql/run.sh --protocol 4 -q

# The same golden files against Apache Cassandra 5.0.9 (installed from Maven Central by
# bench/cassandra/install.sh, started on free ports, stopped afterwards): every statement
# must match. `make compat-cassandra CQL_ARGS=--record` re-records the .result files.
compat-cassandra:
	tests/compat/install.sh python
	tests/cql/run.sh --cassandra --jobs 2 $(CQL_ARGS)

# The benchmark harness's own tests (results parsing, the report, the quiet-server wait,
# SCHED_FIFO for the isolated step): Python's standard library only.
test-bench:
	python3 -m unittest discover -s bench/lib

# Everything CI checks: format, lints, unit + integration tests, real-client compatibility.
test: lint test-rust test-compat test-cql test-bench

bench-quick:
	bench/run.sh quick

bench:
	bench/run.sh full

# Issue 3's transport target end to end: one connection, 128 cached single-row reads in flight.
bench-connection:
	bench/connection.sh

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
