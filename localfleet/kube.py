"""Talking to the clusters: kubectl, health and readiness probes, /metrics with the metrics reader's
token, and Kubernetes quantities."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from pathlib import Path

from localfleet.common import AGENT_NAMESPACE, FleetError

# Every Kueue process's /metrics (ours and upstream's) is HTTPS and wants a bearer token allowed `get` on
# the non-resource URL /metrics (TokenReview + SubjectAccessReview). `up` makes this ServiceAccount,
# ClusterRole and binding on every cluster and writes a token of it to <cluster>/metrics-reader.token
# (the state's `metricsToken`): `status`, the benchmarks and the tests scrape with it.
METRICS_READER = "kueue-federation-metrics-reader"
METRICS_READER_NAMESPACE = AGENT_NAMESPACE
METRICS_TOKEN_FILE = "metrics-reader.token"
METRICS_TOKEN_DURATION = "8760h"  # a year: the apiservers set no --service-account-max-token-expiration


def https_ok(url: str, ca: Path, cert: Path | None = None, key: Path | None = None) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert and key:
        ctx.load_cert_chain(str(cert), str(key))
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=3) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def tls_port_open(port: int) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock, ctx.wrap_socket(sock):
            return True
    except OSError:
        return False


def metrics_reader_objects() -> list[dict]:
    """The identity that scrapes /metrics: a ServiceAccount bound to a ClusterRole allowing `get` on the
    non-resource URL /metrics (what deploy/worker-agent's `kueue-metrics-reader` grants)."""
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": METRICS_READER_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": METRICS_READER, "namespace": METRICS_READER_NAMESPACE},
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {"name": METRICS_READER},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": METRICS_READER},
            "roleRef": {"apiGroup": rbac.split("/")[0], "kind": "ClusterRole", "name": METRICS_READER},
            "subjects": [
                {"kind": "ServiceAccount", "name": METRICS_READER, "namespace": METRICS_READER_NAMESPACE}
            ],
        },
    ]


def metrics_reader_token(kubectl: Kubectl, duration: str = METRICS_TOKEN_DURATION) -> str:
    """A token of the metrics reader (its objects created first, idempotently)."""
    kubectl.apply(metrics_reader_objects())
    res = kubectl("create", "token", METRICS_READER, "-n", METRICS_READER_NAMESPACE, f"--duration={duration}")
    token = res.stdout.strip()
    if not token:
        raise FleetError(f"kubectl create token {METRICS_READER} printed no token: {res.stderr.strip()}")
    return token


def cluster_metrics_token(cluster: dict) -> str | None:
    """The metrics reader's token `up` wrote for a cluster of the state (None if there is none)."""
    path = cluster.get("metricsToken")
    try:
        return Path(path).read_text().strip() if path else None
    except OSError:
        return None


def read_metrics(url: str, token: str | None, timeout: float = 10) -> tuple[int, str]:
    """(HTTP status, body) of a /metrics URL; 0 and the error when unreachable. HTTPS with the bearer
    token; the server's certificate is not checked (our processes' are self-signed, as
    controller-runtime's; Prometheus setups use insecureSkipVerify the same way)."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = None
    if url.startswith("https://"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)


def metrics_summary(url: str, token: str | None) -> str:
    """`metrics <url> (read)` or why not, for `status`."""
    code, body = read_metrics(url, token, timeout=5)
    if code == 200:
        return f"metrics {url} (read with the metrics-reader token)"
    reason = body.strip().splitlines()[0] if body.strip() else "no answer"
    return f"metrics {url} (NOT readable: {code or 'unreachable'} {reason})"


class Kubectl:
    def __init__(self, binary: Path, kubeconfig_path: str) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig_path

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [str(self.binary), "--kubeconfig", self.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and res.returncode != 0:
            raise FleetError(f"kubectl {' '.join(args)} failed: {res.stderr.strip()}")
        return res

    def apply(self, docs: list[dict] | str, timeout: float = 120) -> list[str]:
        """Server-side apply; returns kubectl's lines (`kind/name serverside-applied`). Objects go to
        kubectl as one JSON List (dumping large ones, CRDs, as YAML took seconds)."""
        if isinstance(docs, str):
            text = docs
        else:
            text = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)})
        res = self(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=localfleet",
            "-f",
            "-",
            input=text,
            timeout=timeout,
        )
        return res.stdout.splitlines()

    def get_json(self, *args: str) -> dict:
        return json.loads(self("get", *args, "-o", "json").stdout)


# Kubernetes quantity suffixes and their multipliers.
QUANTITY_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    **{s: Decimal(1000) ** (i + 1) for i, s in enumerate("kMGTPE")},
    **{f"{s}i": Decimal(1024) ** (i + 1) for i, s in enumerate("KMGTPE")},
}


def split_quantity(quantity: str) -> tuple[Decimal, str]:
    """Number and suffix of a quantity: "32Gi" -> (32, "Gi"), "8" -> (8, "")."""
    text = str(quantity).strip()
    suffix = next((s for s in sorted(QUANTITY_SUFFIXES, key=len, reverse=True) if s and text.endswith(s)), "")
    try:
        return Decimal(text.removesuffix(suffix) if suffix else text), suffix
    except InvalidOperation:
        raise FleetError(f"{quantity!r} is not a quantity (e.g. 8, 500m, 32Gi)") from None


def sum_quantities(quantities: Iterable[str]) -> str:
    """The sum, in the inputs' suffix when they share one ("32Gi" x 4 -> "128Gi"), else in base units."""
    parts = [split_quantity(q) for q in quantities]
    suffixes = {suffix for _, suffix in parts}
    if len(suffixes) == 1:
        (suffix,) = suffixes
        total = sum((n for n, _ in parts), Decimal(0))
    else:
        suffix, total = "", sum((n * QUANTITY_SUFFIXES[s] for n, s in parts), Decimal(0))
    return f"{total.normalize():f}{suffix}"


def apiservice_available(kubectl: Kubectl, name: str) -> bool:
    res = kubectl("get", "apiservice", name, "-o", "json", check=False)
    if res.returncode != 0:
        return False
    conditions = (json.loads(res.stdout).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)
