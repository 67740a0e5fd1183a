#!/usr/bin/env bash
# Runs every test: unit tests, then integration and e2e tests against a fleet started for them.
# The fleet is always torn down, whatever happens. Any pytest exit code but 0 fails the run
# (including 5, "no tests collected").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
FLEET_DIR=${TEST_FLEET_DIR:-/dev/shm/kueue-federation-test-fleet}

echo "== lint"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

# helm, for the Helm chart's tests (tests/unit/test_helm_chart.py, tests/integration/test_helm_install.py):
# built once into the binary cache (a cold build is a few minutes), then reused. With it required, those
# tests fail rather than skip when it is missing.
echo "== helm"
$PY hack/localfleet.py build --helm
export KF_REQUIRE_HELM=1

# Real nodes (tests/e2e/test_real_nodes_e2e.py; docs/local-fleet.md, Real nodes): Debian's containerd, runc,
# CNI plugins and busybox, and buildah + mmdebstrap for our image, installed when missing (CI runs as
# root); then kubelet and the node images into the binary cache. Not root: the real-node tests fail
# saying so, unless KF_SKIP_REAL_NODES=1 is set.
echo "== real nodes"
if [ "${KF_SKIP_REAL_NODES:-}" != 1 ] && [ "$(id -u)" = 0 ]; then
  bash hack/install-real-node-packages.sh
  $PY hack/localfleet.py build --real-nodes
fi

echo "== unit tests"
$PY -m pytest tests/unit -q -p no:cacheprovider

cleanup() { $PY hack/localfleet.py --dir "$FLEET_DIR" down || true; }
trap cleanup EXIT
echo "== starting the test fleet in $FLEET_DIR"
$PY hack/localfleet.py --dir "$FLEET_DIR" up
eval "$($PY hack/localfleet.py --dir "$FLEET_DIR" env)"

echo "== integration and e2e tests"
$PY -m pytest tests/integration tests/e2e -q -p no:cacheprovider
cleanup
trap - EXIT

# The short form of `make conformance` (docs/conformance.md): upstream Kueue's baseline and extended
# MultiKueue e2e suites against a conformance fleet of its own; fails if an applicable spec fails.
echo "== conformance (upstream Kueue's MultiKueue e2e suites, short form)"
$PY -m conformance --short
