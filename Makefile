# minibroker: the commands of docs/design.md and the README. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
ZOOKEEPER_JAR := /usr/share/java/zookeeper.jar
PYTEST_ARGS ?=
# make audit: the local cluster's broker dirs unless DATA names others.
DATA ?= $(wildcard minibroker-data/broker-*)
HISTORY ?=
TIMELINE ?=
REPORT ?= audit-report
MASTER ?=

.PHONY: help setup cli system-deps test check unit integration fuzz proto bench bench-deps up up-ha up-tls up-metrics up-spark audit-spark prometheus-image spark-image down down-volumes run chaos audit image clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup: system-deps $(INSTALLED) ## install what is missing: ZooKeeper, Java 17, kcat, the venv with minibroker[dev,audit]

# Debian's zookeeper package, a Java 17 runtime and kcat (the Kafka listener's tests),
# installed only when missing.
system-deps:
	@need=""; \
	[ -f $(ZOOKEEPER_JAR) ] || need="$$need zookeeper"; \
	command -v kcat >/dev/null || need="$$need kcat"; \
	java -version 2>&1 | grep -qE 'version "(1[7-9]|[2-9][0-9])' || need="$$need openjdk-17-jre-headless"; \
	if [ -n "$$need" ]; then \
	  echo "installing Debian packages:$$need"; \
	  if [ "$$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; \
	  else echo "error: need root or sudo to install$$need" >&2; exit 1; fi; \
	  $$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q $$need; \
	fi

# The minibroker command alone (the venv without the dev and audit extras): `make up` installs
# it, so that its next steps (`. .venv/bin/activate`, `minibroker ...`) work as printed.
cli: $(VENV)/bin/minibroker ## only the minibroker command, in .venv (make up runs this; make setup adds the rest)

$(VENV)/bin/minibroker: pyproject.toml
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e .
	@touch $@

$(INSTALLED): pyproject.toml
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[dev,audit]'
	@touch $@

check: $(INSTALLED) ## lint (ruff), type-check (mypy) and check the layering (lint-imports)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy broker controller client deploy chaos proto bench tests
	$(VENV)/bin/lint-imports

test: setup check ## install what is missing, then lint and run the whole suite
	$(PY) -m pytest $(PYTEST_ARGS)

unit: $(INSTALLED) ## only the tests that need no servers
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

integration: setup ## only the tests with real ZooKeeper and broker processes
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

# make test runs the fuzz tests on a fixed seed with a bounded count; this draws fresh ones.
FUZZ_EXAMPLES ?= 5000
fuzz: setup ## the fuzz tests (batches, every RPC) long, on fresh random inputs: make fuzz [FUZZ_EXAMPLES=N]
	HYPOTHESIS_PROFILE=fuzz FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/unit/test_fuzz_batches.py tests/integration/test_fuzz_rpcs.py $(PYTEST_ARGS)

proto: $(INSTALLED) ## regenerate the committed gRPC stubs from proto/wire/minibroker.proto
	$(PY) -m proto.wire.generate

bench: setup bench-deps ## run the benchmarks and write bench/RESULTS.md and bench/results.json
	$(PY) -m bench.run

# What only the benchmarks need: Debian's nats-server and nats-py (bench/side_by_side.py).
bench-deps:
	@if ! command -v nats-server >/dev/null && [ ! -x /usr/sbin/nats-server ]; then \
	  echo "installing Debian packages: nats-server"; \
	  if [ "$$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; \
	  else echo "error: need root or sudo to install nats-server" >&2; exit 1; fi; \
	  $$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q nats-server; \
	fi
	@$(PY) -c "import nats" 2>/dev/null || $(PY) -m pip install -q -e '.[bench]'

# The Docker cluster (deploy/docker-compose.yml, deploy/docker/): README, section "Docker".
up: image cli ## the cluster in Docker: ZooKeeper + 3 brokers, waits for health, prints the bootstrap address and next steps
	@deploy/docker/compose.sh up

up-ha: image cli ## the same on a 3-node ZooKeeper ensemble (MINIBROKER_ZOOKEEPER_NODES=3 make up)
	@MINIBROKER_ZOOKEEPER_NODES=3 deploy/docker/compose.sh up

up-tls: image cli ## the authenticated Docker cluster: mutual TLS, broker-only control requests, ZooKeeper ACLs (files in ./minibroker-tls)
	@MINIBROKER_TLS=1 deploy/docker/compose.sh up

up-metrics: image prometheus-image cli ## the Docker cluster plus Prometheus scraping the brokers (compose profile "metrics", 127.0.0.1:9090)
	@MINIBROKER_METRICS=1 deploy/docker/compose.sh up

up-spark: image spark-image cli ## the Docker cluster plus Spark's standalone master and a worker (compose profile "spark", UI on 127.0.0.1:8080)
	@MINIBROKER_SPARK=1 deploy/docker/compose.sh up

audit-spark: ## the audit of the Docker cluster's logs in place, on the spark profile's master: make audit-spark [AUDIT_ARGS="--conf k=v"]
	@deploy/docker/compose.sh audit $(AUDIT_ARGS)

down: ## stop and remove the Docker cluster's containers, either variant (the data volumes stay)
	@deploy/docker/compose.sh down

down-volumes: ## stop the Docker cluster and drop its data volumes
	@deploy/docker/compose.sh down-volumes

run: setup ## a local cluster of processes (cluster up), a demo topic, a few records, next steps
	@$(PY) -m client.cli cluster up
	@$(PY) -m client.cli topics create demo --partitions 3 --replication-factor 3 --if-not-exists
	@printf 'hello\nfrom\nminibroker\n' | $(PY) -m client.cli produce demo --acks all
	@$(PY) -m client.cli consume demo --from-beginning --max-messages 3 --timeout-ms 10000
	@echo
	@echo "The cluster runs on 127.0.0.1:9091-9093 (ZooKeeper 2181), data in ./minibroker-data. Next:"
	@echo "  . $(VENV)/bin/activate"
	@echo "  minibroker topics describe demo"
	@echo "  seq 1 1000 | minibroker produce demo --acks all"
	@echo "  minibroker consume demo --from-beginning --timeout-ms 2000"
	@echo "  minibroker cluster kill 1; minibroker cluster status; minibroker cluster start 1"
	@echo "  minibroker cluster down"

CHAOS_ARGS ?=
chaos: setup ## a local chaos run: 60 s of mixed faults (longer when strikes and heals run long; set-up, final read and audit add 1-2 min) under a recorded workload, judged by the audit: make chaos [CHAOS_ARGS="--seed 7"]
	$(PY) -m client.cli chaos run --duration 60 --interval 8 $(CHAOS_ARGS)

audit: $(INSTALLED) ## Spark audit of replica logs: make audit [DATA="D1 D2 D3"] [HISTORY=F] [REPORT=D] [TIMELINE=F] [MASTER=URL]
	@if [ -z "$(strip $(DATA))" ]; then \
	  echo "make audit: no data dirs: give DATA, one data dir per broker, or start a local cluster (make run)" >&2; \
	  echo "usage: make audit DATA=\"DIR [DIR ...]\" [HISTORY=history.jsonl] [REPORT=audit-report] [TIMELINE=timeline.jsonl] [MASTER=spark://host:7077]" >&2; \
	  exit 2; \
	fi
	$(PY) -m client.cli audit --data $(DATA) --report $(REPORT) \
	  $(if $(HISTORY),--history $(HISTORY)) $(if $(TIMELINE),--timeline $(TIMELINE)) \
	  $(if $(MASTER),--master $(MASTER))

image: ## the Docker image minibroker:latest (an offline Debian base where no registry answers)
	@deploy/docker/build-image.sh

prometheus-image: image ## the Prometheus image of the "metrics" profile: Debian's prometheus on the minibroker image
	docker build --network host --force-rm --pull=false \
	  --build-arg BASE_IMAGE=$${MINIBROKER_IMAGE:-minibroker:latest} \
	  -f deploy/docker/Dockerfile.prometheus -t $${MINIBROKER_PROMETHEUS_IMAGE:-minibroker-prometheus:latest} deploy/docker

spark-image: image ## the Spark image of the "spark" profile: the minibroker image with the audit extra (pyspark)
	docker build --network host --force-rm --pull=false \
	  --build-arg BASE_IMAGE=$${MINIBROKER_IMAGE:-minibroker:latest} \
	  -f deploy/docker/Dockerfile.spark -t $${MINIBROKER_SPARK_IMAGE:-minibroker-spark:latest} deploy/docker

clean: ## remove the venv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info
