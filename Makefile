# The two commands a user needs: `make up` (a local fleet) and `make test` (every test).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# `make test` uses its own fleet, so it never touches one started by `make up`.
TEST_FLEET_DIR ?= /dev/shm/kueue-federation-test-fleet

.PHONY: help venv build build-helm build-promtool up sample-lws down status env test test-unit test-cluster lint format clean bench-engine conformance \
	bench-engine-upstream bench-federation bench-compare bench-scale diff-upstream chaos image

help:
	@echo "make up      start the local fleet (manager + 2 workers) on 127.0.0.1 with our worker_agent on"
	@echo "             every cluster, our manager on the manager cluster, and MultiKueue set up"
	@echo "             (queues, worker Secrets, MultiKueueClusters, AdmissionCheck); then runs the sample"
	@echo "             LeaderWorkerSet on a worker through the manager and prints how to look at it"
	@echo "make sample-lws  the sample LeaderWorkerSet again (on a fleet from make up)"
	@echo "make status  what runs, readiness, memory per process"
	@echo "make down    stop it"
	@echo "make test    unit, integration and e2e tests (builds binaries, starts and stops a test fleet)"
	@echo "make lint    ruff"
	@echo "make image   our image from the Dockerfile (docker, or buildah as root) into build/image/kueue-federation.tar;"
	@echo "             \`hack/localfleet.py load-image build/image/kueue-federation.tar\` puts it on a fleet's real nodes"
	@echo "make build-helm  the helm CLI into the binary cache (deploy/helm's chart; docs/helm.md)"
	@echo "make build-promtool  promtool into the binary cache: tests then check the alert rules (docs/metrics.md)"
	@echo "make bench-engine           end-to-end admission benchmark of the worker_agent (BENCH_ARGS=--scale 0.1)"
	@echo "make bench-engine-upstream  the same, then upstream Kueue's minimalkueue, side by side"
	@echo "make diff-upstream          every scenario (SCENARIO=FILE or DIR, default tests/scenarios) against our"
	@echo "                            worker_agent and upstream Kueue's minimalkueue; workload-by-workload differences"
	@echo "make conformance  upstream Kueue's own e2e suites against fleets of ours: MultiKueue's, and the single-cluster"
	@echo "                  ones against one cluster (docs/conformance.md; CONFORMANCE_ARGS=--short: MultiKueue's"
	@echo "                  baseline and extended only; CONFORMANCE_ARGS=\"--suites singlecluster\": one family)"
	@echo "make chaos   the chaos test's long form (CHAOS_WORKLOADS=500) on a fleet of its own; see docs/reliability.md"
	@echo "make bench-federation       MultiKueue dispatch of 1,000 Jobs through a fresh fleet (BENCH_ARGS=\"--rate 0\")"
	@echo "make bench-compare          1,000 Jobs + 200 LWS through ours and upstream Kueue, each at its shipped defaults"
	@echo "                            and both at one lifted client budget, 3 interleaved repeats, each on a fresh"
	@echo "                            1+3 fleet (short form: BENCH_ARGS=\"--jobs 200 --lws 40\")"
	@echo "make bench-scale            the manager's cost per Workload vs workers (1,3,10,20) and Workloads (1k,5k,10k),"
	@echo "                            with PNG plots in docs/img (BENCH_ARGS=\"--workers 1,3 --workloads 1000\")"

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

build: venv
	$(PY) hack/localfleet.py build

# The helm CLI, for the Helm chart (deploy/helm) and its tests; `make test` builds it too.
build-helm: venv
	$(PY) hack/localfleet.py build --helm

# promtool, for deploy/monitoring's alert rules: with it, tests/unit/test_monitoring.py also runs
# `promtool check rules` and `promtool test rules` (a cold build takes over 10 minutes: not in make test).
build-promtool: venv
	$(PY) hack/localfleet.py build --promtool

# Our image from the Dockerfile, without Docker when there is none (docs/local-fleet.md, Our image).
image:
	bash hack/build-image.sh

up: build
	$(PY) hack/localfleet.py up --agents --manager --setup-multikueue --dispatcher LeastLoaded

sample-lws:
	$(PYTHON) hack/localfleet.py sample-lws

down:
	$(PYTHON) hack/localfleet.py down

status:
	@$(PYTHON) hack/localfleet.py status

env:
	@$(PYTHON) hack/localfleet.py env

test: venv build
	TEST_FLEET_DIR=$(TEST_FLEET_DIR) bash hack/run-tests.sh

test-unit: venv
	$(PY) -m pytest tests/unit -q

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The benchmarks are the package bench/ (one module each, `python -m bench.<name>`); see docs/benchmarks.md.
# Kueue's scheduler baseline (15,000 workloads) through a fresh local cluster.
BENCH_ARGS ?=
bench-engine: venv
	$(PY) -m bench.engine $(BENCH_ARGS)

bench-engine-upstream: venv
	$(PY) -m bench.engine --compare-upstream $(BENCH_ARGS)

# One scenario (or every one under a directory) against ours and upstream Kueue; see docs/differential.md.
SCENARIO ?= tests/scenarios
DIFF_ARGS ?=
diff-upstream: venv
	$(PY) -m bench.diff_upstream $(DIFF_ARGS) $(SCENARIO)

# Jobs submitted on the manager until MultiKueue has them Admitted, through its own fleet; see docs/benchmarks.md.
bench-federation: venv
	$(PY) -m bench.federation $(BENCH_ARGS)

# The long form of tests/e2e/test_chaos.py (the short one runs in `make test`); see docs/reliability.md.
CHAOS_WORKLOADS ?= 500
chaos: venv build
	CHAOS_MODE=long CHAOS_WORKLOADS=$(CHAOS_WORKLOADS) $(PY) -m pytest tests/e2e/test_chaos.py -q -s -p no:cacheprovider

# The same mix through our MultiKueue and upstream Kueue's, one fresh fleet each; see docs/benchmarks.md.
bench-compare: venv
	$(PY) -m bench.compare $(BENCH_ARGS)

# Upstream Kueue's own e2e suites (MultiKueue, single-cluster) against fleets of ours; see docs/conformance.md.
CONFORMANCE_ARGS ?=
conformance: venv build
	$(PY) -m conformance $(CONFORMANCE_ARGS)

# The scaling series (light fleets, one per worker count) and its plots; see docs/benchmarks.md.
# matplotlib comes from the `bench` extra, installed here only: `make venv` does not need it.
bench-scale: venv
	$(PY) -c 'import matplotlib' 2>/dev/null || $(PY) -m pip install -q -e '.[bench]'
	$(PY) -m bench.scale $(BENCH_ARGS)

clean: down
	rm -rf $(VENV) .pytest_cache build *.egg-info
