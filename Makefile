# The front door. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TOPOLOGY ?= 2m-2s-sync
BROKER ?= ours
# ours, Apache's 4.9 (BROKER=apache: an image made from ROCKETMQ_HOME) and rocketmq-rust's (BROKER=rust: an
# image made from make peer-broker's binary) run on either backend, docker by default
BACKEND ?= docker
BROKER_ARGS = $(if $(filter-out ours,$(BROKER)),--broker $(BROKER)) $(if $(ROCKETMQ_HOME),--rocketmq-home "$(ROCKETMQ_HOME)")
FORMAT ?= table
RUN ?=
PYTEST_WORKERS ?= 3
FUZZ_SECONDS ?= 60

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[1m%-18s\033[0m %s\n", $$1, $$2}'
	@echo "  variables: TOPOLOGY=$(TOPOLOGY) BACKEND=$(BACKEND) BROKER=ours|apache|rust|ours,broker-a-s=apache ROCKETMQ_HOME=<4.9.x distribution> NAME=<cluster name> BASE_PORT=<broker-a port> SET="key=v node:key=v" FORMAT=table|json KEEP_DATA=1 RUN=<run folder>"

venv: $(STAMP) ## create .venv with the pinned dependencies (every other target does this itself)

$(STAMP): pyproject.toml requirements.lock setup.py rmqha/broker/fastpath/_fastsend.c rmqha/broker/ha/_frames.c
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=/path/to/python3.11 ...'" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "==> installing pinned dependencies into $(VENV) (the first run downloads wheels, about 400 MB)"
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --progress-bar on -c requirements.lock -e '.[dev]' | grep -vE '^(Requirement already satisfied|Collecting|Using cached)' || true
	@$(PY) -c 'import twisted, rocketmq.client, pyspark' || { echo "error: the dependencies did not install; see pip's output above" >&2; exit 1; }
	@touch $@

CLIENT5_VENV := .venv-client5
CLIENT5_STAMP := $(CLIENT5_VENV)/.installed

venv-client5: $(CLIENT5_STAMP) ## create .venv-client5 with the official 5.x client (rocketmq-python-client 5.1.2, pinned in clients/python5/requirements.lock)

$(CLIENT5_STAMP): clients/python5/requirements.lock
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=/path/to/python3.11 ...'" >&2; exit 1; }
	@test -x $(CLIENT5_VENV)/bin/python || $(PYTHON) -m venv $(CLIENT5_VENV)
	@$(CLIENT5_VENV)/bin/python -m pip install --quiet --upgrade pip
	@$(CLIENT5_VENV)/bin/python -m pip install --quiet -r clients/python5/requirements.lock
	@$(CLIENT5_VENV)/bin/python -c 'import rocketmq.v5.producer' || { echo "error: the 5.x client did not install; see pip's output above" >&2; exit 1; }
	@touch $@

# --- the cluster ------------------------------------------------------------------------------
cluster-up: $(STAMP) $(if $(filter docker,$(BACKEND)),images) ## start TOPOLOGY (2m-2s-async|2m-2s-sync|2m-noslave|dledger) on BACKEND (docker|local) and wait until it replicates (ACL=1: aclEnable; BROKER=apache ROCKETMQ_HOME=<dir>: Apache's 4.9.x; BROKER=rust: rocketmq-rust's, after make peer-broker)
	$(PY) -m rmqha.cluster up --topology $(TOPOLOGY) --backend $(BACKEND) $(BROKER_ARGS) $(if $(NAME),--name $(NAME)) $(if $(BASE_PORT),--base-port $(BASE_PORT)) $(if $(filter 1 true yes,$(ACL)),--acl) $(foreach s,$(SET),--set $(s))

cluster-status: $(STAMP) ## print every node's role, offsets and replication (FORMAT=json for JSON lines)
	@$(PY) -m rmqha.cluster status --format $(FORMAT)

cluster-logs: $(STAMP) ## show the nodes' logs (NODE=broker-a-s for one)
	@$(PY) -m rmqha.cluster logs $(NODE)

cluster-down: $(STAMP) ## stop the cluster (KEEP_DATA=1 keeps the stores)
	$(PY) -m rmqha.cluster down $(if $(filter 1 yes true,$(KEEP_DATA)),--keep-data)

outcomes: $(STAMP) ## on the running SYNC_MASTER cluster: SEND_OK, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE with the official client (NAME=)
	$(PY) -m rmqha.chaos.outcomes $(if $(NAME),--name $(NAME))

lock: $(STAMP) ## write requirements.lock: the exact versions now in .venv (after changing pyproject.toml's dependencies)
	@{ echo "# Exact versions of every package in the project's own environment (make venv installs with -c this"; \
	   echo "# file; the broker image takes its runtime pins from it). Regenerate after changing pyproject.toml: make lock"; \
	   $(PY) -m pip freeze --exclude-editable | grep -v '^rocketmq-ha-refcluster'; } > requirements.lock
	@echo "requirements.lock: $$(grep -c '==' requirements.lock) pins"

# --- tests ------------------------------------------------------------------------------------
lint: $(STAMP) ## the import contracts (lint-imports: the layers broker <- runs <- cluster|proxy <- chaos|pipeline <- matrix <- rmqkit, the layers inside rmqha/pipeline (no decode cycle), nothing imports tests/), ruff's check and format check, mypy --strict on the HA core and the store (all three configured in pyproject.toml) and c-warnings
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --check --no-cache .
	$(VENV)/bin/mypy
	@$(MAKE) --no-print-directory c-warnings

C_SOURCES := rmqha/broker/fastpath/_fastsend.c rmqha/broker/ha/_frames.c
c-warnings: $(STAMP) ## the C accelerators compiled as setup.py builds them, every warning an error (-Wall -Wextra -Werror)
	@cc=$${CC:-cc}; command -v $$cc >/dev/null || { echo "note: no C compiler ($$cc): the C warnings check is skipped"; exit 0; }; \
	inc=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	for c in $(C_SOURCES); do echo "$$cc -O2 -Wall -Wextra -Werror $$c"; \
	  $$cc -O2 -Wall -Wextra -Werror -fPIC -I"$$inc" -c $$c -o /dev/null || exit 1; done

test: rust-client-background ## the Rust client's build started in the background (when not cached) before anything else, then the venv, the base and toxiproxy images and the 5.x client's environment side by side, then lint, the broker image and the fast tier (make test-unit) side by side, then every other test: Spark and compiled unit tests, integration (real processes, containers, both clients), and examples/ (the Spark-cluster audit is make test-spark-cluster)
	@echo "==> the venv, the images (log: build/images.log), the 5.x client's environment, lint and the fast tier, side by side; each one's output when it ends"
	@$(MAKE) --no-print-directory -j4 --output-sync=target venv-client5 lint images-quiet test-unit
	$(PY) -m pytest tests examples -n $(PYTEST_WORKERS) --dist loadfile --durations=12 -m "not checkers and not fast and not audit_scenarios" \
		--ignore=tests/integration/test_audit_spark_cluster.py

test-checkers: $(STAMP) rust-client ## the long chaos runs, audited (make test runs the recovery, repair, crashfs and tiny docker chaos runs without the audit): every planted bug (rmqha/controls/planted.py), the same run without bugs (repaired), the unrepaired fork the delivery checker fails, a consumer reading from the slave through a master outage, a run with ACL on, and a Rust-client run with its trace dispatcher on
	$(PY) -m pytest tests/integration/test_planted_bugs.py tests/integration/test_power_crashfs.py tests/integration/test_chaos_failover_consumer.py tests/integration/test_delivery_verdicts.py tests/integration/test_ha_recovery.py tests/integration/test_dledger_rust_failover.py tests/integration/test_acl.py tests/integration/test_chaos_rust_trace.py tests/integration/test_chaos_run.py -m checkers -n 3 --durations=5

test-spark: $(STAMP) ## every test that starts Spark: the pipeline's audit scenarios (make test runs a short version, each path of the gathering once; the checkers' verdicts are judged on hand-written runs in the fast tier) and the audit of a real local cluster run, through pipeline --serve
	$(PY) -m pytest tests/unit tests/integration/test_audit_cluster_run.py -m "spark or audit_scenarios" -n $(PYTEST_WORKERS) --dist loadfile --durations=10

test-examples: $(STAMP) images ## the example application (examples/orders) through the pytest plugin's fixtures (ROCKETMQ_BACKEND=docker|local)
	$(PY) -m pytest examples $(if $(ROCKETMQ_BACKEND),--rocketmq-backend $(ROCKETMQ_BACKEND)) --durations=5

test-spark-cluster: $(STAMP) ## the audit through spark-submit on a standalone Spark master and worker, against the local run
	$(PY) -m pytest tests/integration/test_audit_spark_cluster.py -q

test-durations: ## after a full make test: keep its seconds per test file (build/test-durations.json) as tests/durations.json, the order pytest-xdist hands files out in (tests/conftest.py)
	@test -f build/test-durations.json || { echo "run make test first: it writes build/test-durations.json"; exit 2; }
	cp build/test-durations.json tests/durations.json

test-unit: $(STAMP) ## the fast tier, under a minute: tests/unit without the ones that start Spark (a JVM) or a compiler (markers spark, compiles)
	$(PY) -m pytest tests/unit -m fast -n $(PYTEST_WORKERS) --dist loadfile --durations=5

test-apache: $(STAMP) ## tests against Apache RocketMQ 4.9.x: make test-apache ROCKETMQ_HOME=<binary distribution> (builds its image first for the docker tests; they skip in make test without one)
	@test -n "$(ROCKETMQ_HOME)" || { echo "usage: make test-apache ROCKETMQ_HOME=<dir of an Apache RocketMQ 4.9.x binary distribution>" >&2; exit 2; }
	@ROCKETMQ_HOME="$(ROCKETMQ_HOME)" images/build.sh all apache || echo "note: the images did not build (above): the docker-backend tests skip"
	ROCKETMQ_HOME="$(ROCKETMQ_HOME)" $(PY) -m pytest tests/integration -m apache -q --durations=5 -p no:cacheprovider

test-integration: $(STAMP) images rust-client venv-client5 ## integration tests only (builds the images first)
	$(PY) -m pytest tests/integration -n $(PYTEST_WORKERS) --dist loadfile --durations=12

fuzz: $(STAMP) ## coverage-guided fuzzing (atheris) of every decoder a peer reaches, FUZZ_SECONDS=60 per target (FUZZ_TARGETS= to pick)
	$(PY) -m fuzz.run --seconds $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-native: $(STAMP) ## the send path's C accelerator rebuilt with AddressSanitizer + UBSan and fuzzed against the Python path (FUZZ_SECONDS per run)
	$(PY) -m fuzz.native --seconds $(FUZZ_SECONDS)

protos: $(STAMP) ## regenerate rmqha/proxy/third_party/rocketmq_apis/v2/*_pb2*.py from the .proto files there (grpcio-tools; the generated modules are committed)
	$(PY) -m rmqha.proxy.protos

mutation: $(STAMP) ## mutation testing of the HA core, the record format, names, log limits, the chaos fault table, HA recovery and DLedger (protocol, entry, file store): one score per module (MODULES=rmqha.broker.ha.wire ... BUDGET=s per module)
	$(PY) -m tools.mutation $(MODULES) $(if $(BUDGET),--budget $(BUDGET))

mutation-crashfs: $(STAMP) ## mutation testing of crashfs's cut logic (images/crashfs/src/model.rs) with cargo-mutants, installed into ~/.cargo on first use
	@command -v cargo-mutants >/dev/null || cargo install --locked cargo-mutants@27.1.0
	$(PY) -m tools.mutation.cargo

# --- audit and benchmarks ---------------------------------------------------------------------
audit: $(STAMP) ## audit a run folder: make audit RUN=run/default [OUT=dir] (exit 1 if a guarantee failed)
	@test -n "$(RUN)" || { echo "usage: make audit RUN=<run folder> [OUT=<dir>], e.g. RUN=run/default" >&2; exit 2; }
	$(PY) -m rmqha.pipeline "$(RUN)" $(if $(OUT),--out "$(OUT)")

chaos: $(STAMP) $(if $(filter docker,$(BACKEND)),images) $(if $(filter rust,$(or $(CLIENT),$(if $(findstring rust,$(BROKER)),rust))),rust-client) $(if $(filter python5,$(CLIENT)),venv-client5) ## a chaos run: workload + nemesis on TOPOLOGY/BACKEND, then the audit (CLIENT=python|rust|python5 (BROKER=rust: rust) TRACE=1 (rust: trace records) DURATION= RATE= SEED= NEMESIS= (dledger: kill-leader,kill-follower,...) SWEEP=1 REPAIR=1 RECOVERY=1 ACL=1 LATE_CONSUMER=<s> SET="k=v ..." OUT= BROKER=apache ROCKETMQ_HOME=<dir>)
	$(PY) -m rmqha.chaos.run --prewarm-audit $(if $(LATE_CONSUMER),--late-consumer-at $(LATE_CONSUMER)) --topology $(TOPOLOGY) --backend $(BACKEND) $(BROKER_ARGS) $(if $(NAME),--name $(NAME)) $(if $(BASE_PORT),--base-port $(BASE_PORT)) $(if $(DURATION),--duration $(DURATION)) $(if $(RATE),--rate $(RATE)) $(if $(SEED),--seed $(SEED)) $(if $(NEMESIS),--nemesis $(NEMESIS)) $(if $(SWEEP),--sweep) $(if $(filter 1 yes true,$(REPAIR)),--repair) $(if $(filter 1 yes true,$(RECOVERY)),--set haRecoveryEnable=true) $(if $(filter 1 yes true,$(ACL)),--acl) $(foreach s,$(SET),--set $(s)) $(if $(CLIENT),--client $(CLIENT)) $(if $(OUT),--out "$(OUT)")

repair: $(STAMP) ## repair a forked broker group (SLAVE_AHEAD): make repair GROUP=broker-a [NAME=]; re-sends the slave's stranded messages, then resyncs it
	@test -n "$(GROUP)" || { echo "usage: make repair GROUP=<brokerName> [NAME=<cluster>], e.g. GROUP=broker-a" >&2; exit 2; }
	$(PY) -m rmqha.cluster repair $(if $(NAME),--name $(NAME)) $(foreach t,$(ACCEPT_LOSS),--accept-loss $(t)) $(GROUP)

chaos-matrix: $(STAMP) $(if $(findstring docker,$(BACKENDS)),images) ## the guarantee matrix: every configuration x fault kind, SEEDS=3 runs each (BACKENDS=local|local,docker MODES=ours|ours,4.9,recovery,apache (apache: ROCKETMQ_HOME=<4.9.x distribution>) LANES=2 LONG=1 PLANTED=1 CONFIGS= DURATION= OUT=build/chaos-matrix)
	$(if $(ROCKETMQ_HOME),ROCKETMQ_HOME="$(ROCKETMQ_HOME)") $(PY) -m rmqha.matrix --seeds $(or $(SEEDS),3) --backends $(or $(BACKENDS),local) --lanes $(or $(LANES),2) $(if $(filter 1,$(LONG)),--long-holds) $(if $(filter 1,$(PLANTED)),--planted) $(if $(MODES),--modes $(MODES)) $(if $(CONFIGS),--configs $(CONFIGS)) $(if $(DURATION),--duration $(DURATION)) $(if $(OUT),--out "$(OUT)")

images: ## build the container images (base, broker, toxiproxy; with BROKER=apache also rmqha/apache from ROCKETMQ_HOME, with BROKER=rust rmqha/rust from make peer-broker's binary) with no registry; a no-op when up to date
	@$(if $(findstring apache,$(BROKER) $(MODES)),ROCKETMQ_HOME="$(ROCKETMQ_HOME)") images/build.sh all $(if $(findstring apache,$(BROKER) $(MODES)),apache) $(if $(findstring rust,$(BROKER)),rust)

# make test builds the images beside lint and the fast tier (minutes on a fresh machine, mostly debootstrap's
# downloads): their lines would cut through pytest's, so they go to a log and a failure shows its end.
# The base and toxiproxy images need no venv, so a cold run makes them (debootstrap's downloads, toxiproxy's
# cargo build) while the venv installs; the broker image takes its pins with the venv's Python after it.
images-quiet: images-quiet-early $(STAMP)
	@if images/build.sh all >> build/images.log 2>&1; then grep -E 'ok: |up to date' build/images.log; \
	 else tail -n 30 build/images.log; echo "error: the images did not build (full log: build/images.log)" >&2; exit 1; fi

images-quiet-early:
	@mkdir -p build
	@images/build.sh base toxiproxy > build/images.log 2>&1 || \
	 { tail -n 30 build/images.log; echo "error: the images did not build (full log: build/images.log)" >&2; exit 1; }

test-official-client: $(STAMP) ## the official C++ client against real broker processes
	$(PY) -m pytest tests/integration/test_official_client.py -q

rust-client-background: ## start rust-client's build in the background unless it is cached (make test: its tests wait for it and run last)
	@clients/rust/build.sh --background

rust-client: ## build the second test client (clients/rust on crates.io rocketmq-client-rust), release, cached per content in ~/.cache (RUST_CACHE=)
	@clients/rust/build.sh

test-rust-client: $(STAMP) rust-client ## the Rust client (rocketmq-client-rust) against real broker processes
	$(PY) -m pytest tests/integration/test_rust_client.py tests/integration/test_rust_client_transactions.py -q

bench: bench-ha bench-send bench-decode ## run the benchmarks

PEER_VERSION ?= 1.0.0
PEER_ROOT ?= $(HOME)/.cache/rocketmq-ha-refcluster/rocketmq-rust-$(PEER_VERSION)
peer-broker: ## build rocketmq-rust's broker (crates.io rocketmq-broker, PEER_VERSION=1.0.0) for bench-send's peer line and BROKER=rust; about 40 min on 2 shared cores (16 CPU-min), cached in ~/.cache
	@test -x $(PEER_ROOT)/bin/rocketmq-broker-rust || { echo "==> cargo install rocketmq-broker $(PEER_VERSION) into $(PEER_ROOT) (one time, about 40 min on 2 shared cores)"; \
	  cargo install rocketmq-broker --version $(PEER_VERSION) --locked --root $(PEER_ROOT); }
	@echo "peer broker: $(PEER_ROOT)/bin/rocketmq-broker-rust (bench-send finds it there)"

bench-send: $(STAMP) ## (CRASHFS=1: also with the store on crashfs, its cost beside the 2x goal) send TPS, p50/p99/p99.9 and broker CPU per message (official client and a raw pipelined producer), beside a raw loopback round trip
	$(PY) bench/bench_send.py $(if $(filter 1,$(CRASHFS)),--crashfs)

bench-decode: $(STAMP) ## Spark commit-log decode beside a raw read of the same files
	$(PY) bench/bench_decode.py


bench-ha: $(STAMP) ## HA catch-up throughput beside raw loopback TCP and raw disk write
	$(PY) bench/bench_ha_catchup.py

clean: ## remove the virtual environment, build cache and run folders
	rm -rf $(VENV) build run

.PHONY: lock help venv lint c-warnings cluster-up cluster-status cluster-logs cluster-down outcomes test test-durations test-unit test-apache test-integration test-checkers test-spark \
	test-official-client test-examples test-spark-cluster rust-client rust-client-background test-rust-client fuzz mutation mutation-crashfs audit chaos chaos-matrix images images-quiet images-quiet-early bench bench-ha bench-send bench-decode clean
