"""The visibility API (visibility.kueue.x-k8s.io) end to end, on a fleet of its own (`up --agents`):
through each cluster's kube-apiserver (API aggregation, `kubectl get --raw`), the pending workloads of
a ClusterQueue and of its LocalQueues in admission order with their positions, limit and offset,
upstream's 404 and 400, 403 for a user without RBAC and 200 once the pending-workloads viewer roles
of deploy/rbac/user-roles are bound, discovery; and, straight at the agent's port, that a
request without a client certificate is 401 and that X-Remote-* headers count only from the
front-proxy certificate."""

from __future__ import annotations

import base64
import datetime as dt
import json
import socket
import ssl
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from fleet_kit import REPO, Fleet, own_fleet, wait_until

pytestmark = pytest.mark.realcluster

WORKER = "worker1"
GROUP = "visibility.kueue.x-k8s.io"
VIEWER_ROLES = REPO / "deploy" / "rbac" / "user-roles" / "pending-workloads-roles.yaml"
SERVICE_NAME = "kueue-visibility-server.kueue-system.svc"


@pytest.fixture(scope="module")
def fleet():
    with own_fleet("kf-visibility-", "--agents", "--workers", "1", "--nodes", "1") as fleet:
        yield fleet


def kubectl(fleet: Fleet, cluster: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [fleet.kubectl_binary, "--kubeconfig", fleet.state["clusters"][cluster]["kubeconfig"], *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
    )


def raw(fleet: Fleet, cluster: str, path: str, *args: str) -> subprocess.CompletedProcess:
    return kubectl(fleet, cluster, "get", "--raw", path, *args)


def raw_json(fleet: Fleet, cluster: str, path: str) -> dict:
    res = raw(fleet, cluster, path)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def apply(fleet: Fleet, cluster: str, *objects: dict) -> None:
    res = kubectl(
        fleet,
        cluster,
        "apply",
        "-f",
        "-",
        input=json.dumps({"kind": "List", "apiVersion": "v1", "items": list(objects)}),
    )
    assert res.returncode == 0, res.stderr


def workload(ns: str, name: str, queue: str, priority: int) -> dict:
    container = {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "1"}}}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "queueName": queue,
            "priority": priority,
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}],
        },
    }


def positions(items: list[dict]) -> list[tuple[str, int, int, str, int]]:
    return [
        (
            i["metadata"]["name"],
            i["positionInClusterQueue"],
            i["positionInLocalQueue"],
            i["localQueueName"],
            i["priority"],
        )
        for i in items
    ]


@pytest.fixture(scope="module")
def queue(fleet):
    """On the worker: a ClusterQueue with 1 CPU held by a blocker, two LocalQueues, and five pending
    workloads (one made by a Job) whose order is known: priority, then creation (one second apart)."""
    suffix = uuid.uuid4().hex[:6]
    ns, cq = f"vis-{suffix}", f"vis-cq-{suffix}"
    apply(
        fleet,
        WORKER,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": "1"}]}
                        ],
                    }
                ],
            },
        },
        *(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": lq, "namespace": ns},
                "spec": {"clusterQueue": cq},
            }
            for lq in ("lq-a", "lq-b")
        ),
    )
    apply(fleet, WORKER, workload(ns, "blocker", "lq-a", 100))

    def admitted() -> bool:
        out = kubectl(fleet, WORKER, "get", "workload", "blocker", "-n", ns, "-o", "json")
        return out.returncode == 0 and bool((json.loads(out.stdout).get("status") or {}).get("admission"))

    wait_until("the blocker admitted", admitted, 90)
    for name, lq, priority in (("w-high", "lq-a", 50), ("w-mid-1", "lq-b", 20), ("w-mid-2", "lq-a", 20)):
        apply(fleet, WORKER, workload(ns, name, lq, priority))
        time.sleep(1.1)  # creation timestamps have one-second resolution
    apply(fleet, WORKER, workload(ns, "w-low", "lq-b", 5))
    time.sleep(1.1)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "job-a", "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "lq-a"}},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                }
            }
        },
    }
    apply(fleet, WORKER, job)
    path = f"/apis/{GROUP}/v1beta1/clusterqueues/{cq}/pendingworkloads"
    wait_until("five pending workloads", lambda: len(raw_json(fleet, WORKER, path)["items"]) == 5, 90)
    return ns, cq


def test_pending_workloads_of_the_cluster_queue_in_admission_order(fleet, queue):
    ns, cq = queue
    summary = raw_json(fleet, WORKER, f"/apis/{GROUP}/v1beta1/clusterqueues/{cq}/pendingworkloads")
    assert (summary["kind"], summary["apiVersion"], summary["metadata"]) == (
        "PendingWorkloadsSummary",
        f"{GROUP}/v1beta1",
        {},
    )
    items = summary["items"]
    job_workload = items[4]["metadata"]["name"]
    assert job_workload.startswith("job-job-a-")
    assert positions(items) == [
        ("w-high", 0, 0, "lq-a", 50),
        ("w-mid-1", 1, 0, "lq-b", 20),
        ("w-mid-2", 2, 1, "lq-a", 20),
        ("w-low", 3, 1, "lq-b", 5),
        (job_workload, 4, 2, "lq-a", 0),
    ]
    # Metadata as upstream fills it: the Workload's creationTimestamp, its owner (four fields only).
    wl = json.loads(kubectl(fleet, WORKER, "get", "workload", "w-high", "-n", ns, "-o", "json").stdout)
    assert items[0]["metadata"] == {
        "name": "w-high",
        "namespace": ns,
        "creationTimestamp": wl["metadata"]["creationTimestamp"],
    }
    job = json.loads(kubectl(fleet, WORKER, "get", "job", "job-a", "-n", ns, "-o", "json").stdout)
    assert items[4]["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "job-a", "uid": job["metadata"]["uid"]}
    ]
    # v1beta2 (the preferred version) answers the same items.
    v1beta2 = raw_json(fleet, WORKER, f"/apis/{GROUP}/v1beta2/clusterqueues/{cq}/pendingworkloads")
    assert v1beta2["apiVersion"] == f"{GROUP}/v1beta2" and v1beta2["items"] == items


def test_limit_offset_and_local_queues(fleet, queue):
    ns, cq = queue
    cq_path = f"/apis/{GROUP}/v1beta1/clusterqueues/{cq}/pendingworkloads"
    sliced = raw_json(fleet, WORKER, f"{cq_path}?limit=2&offset=1")["items"]
    assert [
        (i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in sliced
    ] == [
        ("w-mid-1", 1, 0),
        ("w-mid-2", 2, 1),
    ]
    assert raw_json(fleet, WORKER, f"{cq_path}?limit=-1")["items"] == []
    assert len(raw_json(fleet, WORKER, f"{cq_path}?limit=0")["items"]) == 5  # 0 is the default, 1000
    assert raw_json(fleet, WORKER, f"{cq_path}?offset=5")["items"] == []
    lq_a = f"/apis/{GROUP}/v1beta1/namespaces/{ns}/localqueues/lq-a/pendingworkloads"
    items = raw_json(fleet, WORKER, lq_a)["items"]
    assert [(i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in items][
        :2
    ] == [
        ("w-high", 0, 0),
        ("w-mid-2", 2, 1),
    ]
    assert [(i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in items] == [
        (0, 0),
        (2, 1),
        (4, 2),
    ]
    later = raw_json(fleet, WORKER, f"{lq_a}?offset=1&limit=1")["items"]
    assert [
        (i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in later
    ] == [("w-mid-2", 2, 1)]
    lq_b = raw_json(fleet, WORKER, f"/apis/{GROUP}/v1beta2/namespaces/{ns}/localqueues/lq-b/pendingworkloads")
    assert positions(lq_b["items"]) == [("w-mid-1", 1, 0, "lq-b", 20), ("w-low", 3, 1, "lq-b", 5)]


def test_the_setup_guides_cluster_queue_answers_on_every_cluster(fleet):
    """`kubectl get --raw .../clusterqueues/cluster-queue/pendingworkloads`, the documented call, on
    the manager and the worker (setup-multikueue made `cluster-queue` on both; nothing waits there)."""
    for cluster in ("manager", *fleet.workers):
        summary = raw_json(
            fleet, cluster, f"/apis/{GROUP}/v1beta1/clusterqueues/cluster-queue/pendingworkloads"
        )
        assert summary == {
            "kind": "PendingWorkloadsSummary",
            "apiVersion": f"{GROUP}/v1beta1",
            "metadata": {},
            "items": [],
        }


def test_errors_are_upstreams_on_every_cluster(fleet, queue):
    ns, _ = queue
    for cluster in ("manager", WORKER):
        missing = raw(fleet, cluster, f"/apis/{GROUP}/v1beta1/clusterqueues/nope/pendingworkloads")
        assert missing.returncode != 0
        assert f'Error from server (NotFound): clusterqueue.{GROUP} "nope" not found' in missing.stderr
    missing_lq = raw(
        fleet, WORKER, f"/apis/{GROUP}/v1beta2/namespaces/{ns}/localqueues/nope/pendingworkloads"
    )
    assert f'Error from server (NotFound): localqueue.{GROUP} "nope" not found' in missing_lq.stderr
    bad = raw(fleet, WORKER, f"/apis/{GROUP}/v1beta1/clusterqueues/nope/pendingworkloads?limit=ten")
    assert 'Error from server (BadRequest): strconv.ParseInt: parsing "ten": invalid syntax' in bad.stderr


def test_discovery(fleet):
    for cluster in ("manager", WORKER):
        versions = kubectl(fleet, cluster, "api-versions").stdout.split()
        assert {f"{GROUP}/v1beta1", f"{GROUP}/v1beta2"} <= set(versions)
        # Every aggregated API answers discovery: api-resources lists the cluster's resources without
        # "unable to retrieve the complete list of server APIs".
        res = kubectl(fleet, cluster, "api-resources", f"--api-group={GROUP}")
        assert res.returncode == 0 and res.stderr == "", res.stderr
        listed = raw_json(fleet, cluster, f"/apis/{GROUP}/v1beta1")
        assert [(r["name"], r["namespaced"], r["verbs"]) for r in listed["resources"]] == [
            ("clusterqueues", False, []),
            ("clusterqueues/pendingworkloads", False, ["get"]),
            ("localqueues", True, []),
            ("localqueues/pendingworkloads", True, ["get"]),
        ]
        apiservices = json.loads(kubectl(fleet, cluster, "get", "apiservices", "-o", "json").stdout)["items"]
        ours = {a["metadata"]["name"]: a for a in apiservices if a["spec"].get("group") == GROUP}
        assert sorted(ours) == [f"v1beta1.{GROUP}", f"v1beta2.{GROUP}"]
        for a in ours.values():
            available = [c for c in a["status"]["conditions"] if c["type"] == "Available"]
            assert available and available[0]["status"] == "True", a["status"]


def test_rbac_decides_who_may_read(fleet, queue):
    ns, cq = queue
    cq_path = f"/apis/{GROUP}/v1beta1/clusterqueues/{cq}/pendingworkloads"
    lq_path = f"/apis/{GROUP}/v1beta1/namespaces/{ns}/localqueues/lq-a/pendingworkloads"
    user = f"someone-{uuid.uuid4().hex[:4]}"
    denied = raw(fleet, WORKER, cq_path, f"--as={user}")
    assert denied.returncode != 0
    assert denied.stderr.strip() == (
        f'Error from server (Forbidden): clusterqueues.{GROUP} "{cq}" is forbidden: User "{user}" cannot get '
        f'resource "clusterqueues/pendingworkloads" in API group "{GROUP}" at the cluster scope'
    )
    denied_lq = raw(fleet, WORKER, lq_path, f"--as={user}")
    assert (
        f'User "{user}" cannot get resource "localqueues/pendingworkloads" in API group "{GROUP}" '
        f'in the namespace "{ns}"' in denied_lq.stderr
    )
    # deploy/rbac/user-roles' pending-workloads viewer roles: the LocalQueue one in the namespace only.
    roles = [d for d in yaml.safe_load_all(VIEWER_ROLES.read_text()) if d and d["kind"] == "ClusterRole"]
    apply(fleet, WORKER, *roles)
    apply(
        fleet,
        WORKER,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{user}-lq-viewer", "namespace": ns},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "kueue-pending-workloads-lq-viewer-role",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )
    # Decisions are cached for 10 s, as the apiserver's delegated authorizer does.
    wait_until(
        "the LocalQueue readable", lambda: raw(fleet, WORKER, lq_path, f"--as={user}").returncode == 0, 30
    )
    assert len(json.loads(raw(fleet, WORKER, lq_path, f"--as={user}").stdout)["items"]) == 3
    assert raw(fleet, WORKER, cq_path, f"--as={user}").returncode != 0
    apply(
        fleet,
        WORKER,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{user}-cq-viewer"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "kueue-pending-workloads-cq-viewer-role",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )
    wait_until(
        "the ClusterQueue readable", lambda: raw(fleet, WORKER, cq_path, f"--as={user}").returncode == 0, 30
    )


# -- straight at the agent's port ---------------------------------------------------------------------


def client_cert(ca_crt: Path, ca_key: Path, common_name: str, directory: Path) -> tuple[Path, Path]:
    """A client certificate for `common_name` signed by the given CA, written to `directory`."""
    ca = x509.load_pem_x509_certificate(ca_crt.read_bytes())
    signer = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(signer, hashes.SHA256())  # type: ignore[arg-type]
    )
    crt, pem = directory / f"{common_name}.crt", directory / f"{common_name}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return crt, pem


def direct(
    fleet: Fleet, path: str, headers: dict[str, str], cert: tuple[Path, Path] | None = None
) -> tuple[int, dict]:
    """GET `path` on the worker's agent itself, checking its certificate for the Service name the
    aggregator dials (with the CA the agent injected into the APIService)."""
    apiservice = json.loads(
        kubectl(fleet, WORKER, "get", "apiservice", f"v1beta1.{GROUP}", "-o", "json").stdout
    )
    context = ssl.create_default_context(cadata=base64.b64decode(apiservice["spec"]["caBundle"]).decode())
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    port = int(fleet.state["clusters"][WORKER]["agent"]["visibility"].rsplit(":", 1)[1])
    lines = [f"GET {path} HTTP/1.1", "Host: localhost", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with context.wrap_socket(sock, server_hostname=SERVICE_NAME) as tls:
            tls.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            data = b""
            while chunk := tls.recv(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_the_agent_trusts_headers_only_from_the_front_proxy(fleet, queue, tmp_path):
    _, cq = queue
    path = f"/apis/{GROUP}/v1beta1/clusterqueues/{cq}/pendingworkloads"
    admin = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
    code, body = direct(fleet, path, admin)
    assert (code, body) == (
        401,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        },
    )
    # A certificate of the cluster's client CA named like the front proxy: it is a user of its own
    # (who may read nothing), and its X-Remote-* headers are ignored.
    pki = fleet.run_dir / "pki"
    impostor = client_cert(pki / "ca.crt", pki / "ca.key", "front-proxy-client", tmp_path)
    code, body = direct(fleet, path, admin, impostor)
    assert code == 403
    assert body["message"].startswith(
        f'clusterqueues.{GROUP} "{cq}" is forbidden: User "front-proxy-client" cannot get'
    )
    # The apiserver's own front-proxy certificate: the headers name the user.
    worker_pki = fleet.run_dir / WORKER / "pki"
    proxy = (worker_pki / "front-proxy-client.crt", worker_pki / "front-proxy-client.key")
    code, body = direct(fleet, path, admin, proxy)
    assert code == 200 and len(body["items"]) == 5
    code, body = direct(fleet, path, {"X-Remote-User": "nobody-at-all"}, proxy)
    assert code == 403 and 'User "nobody-at-all" cannot get' in body["message"]
