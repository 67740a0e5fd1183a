"""The MultiKueue setup guide on a fleet (`setup-multikueue`): its objects, named as upstream's examples
(cluster-queue, user-queue, sample-multikueue, multikueue-test, multikueue-test-worker1, ...), and the
sample LeaderWorkerSet (`sample-lws`) that ends `up --setup-multikueue`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from kueue_domain.api import MULTIKUEUE_CONTROLLER_NAME as MULTIKUEUE_CONTROLLER
from localfleet.binaries import Binaries, read_versions
from localfleet.common import (
    AGENT_COMPONENT,
    AGENT_NAMESPACE,
    ANNOTATION_WORKER_CLUSTER,
    DEFAULT_FLAVOR,
    DEFAULT_RUN_DIR,
    KUEUE_API,
    KUEUE_COMPONENTS,
    MANAGER,
    MANAGER_COMPONENT,
    REPO,
    FleetError,
    b64,
    fmt_duration,
    log,
)
from localfleet.kube import Kubectl, sum_quantities
from localfleet.processes import State, wait_for

# The objects of the MultiKueue setup guide (`setup-multikueue`), named as upstream's examples.
SETUP_CLUSTER_QUEUE = "cluster-queue"
SETUP_LOCAL_QUEUE = "user-queue"
SETUP_NAMESPACE = "default"
SETUP_ADMISSION_CHECK = "sample-multikueue"
SETUP_MULTIKUEUE_CONFIG = "multikueue-test"
SAMPLE_JOB_FILE = REPO / "examples" / "multikueue" / "sample-job.yaml"
SAMPLE_JOBSET_FILE = REPO / "examples" / "multikueue" / "sample-jobset.yaml"
SAMPLE_TRAINJOB_FILE = REPO / "examples" / "multikueue" / "sample-trainjob.yaml"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
# The sample LWS `up --setup-multikueue` (and `sample-lws`) submits on the manager.
SAMPLE_LWS_FILE = REPO / "examples" / "sample-leaderworkerset.yaml"
SAMPLE_LWS_TIMEOUT = 180.0
# A worker's quota when state.json does not record its capacity: the default 4 nodes x 8 CPU / 32Gi.
DEFAULT_WORKER_CAPACITY = {"cpu": "32", "memory": "128Gi"}
# MultiKueueConfig.spec.clusters lists at most this many clusters (maxItems in the CRD).
MAX_MULTIKUEUE_CLUSTERS = 20


@dataclass(frozen=True)
class WorkerSetup:
    """What setup-multikueue needs to know about one worker."""

    name: str
    cpu: str
    memory: str
    multikueue_kubeconfig: str  # the content of <worker>/multikueue.kubeconfig


def multikueue_cluster_name(worker: str) -> str:
    """The MultiKueueCluster of a fleet worker, named as the setup guide names it
    (`multikueue-test-worker1`); its Secret keeps the guide's `worker1-secret`."""
    return f"{SETUP_MULTIKUEUE_CONFIG}-{worker}"


def fleet_worker(cluster_name: str) -> str:
    """The fleet worker behind a MultiKueueCluster name (a Workload's clusterName): the inverse of
    multikueue_cluster_name; a name without the guide's prefix is returned as it is."""
    return cluster_name.removeprefix(f"{SETUP_MULTIKUEUE_CONFIG}-")


def resource_flavor() -> dict:
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": DEFAULT_FLAVOR},
        "spec": {},
    }


def cluster_queue(cpu: str, memory: str, admission_checks: list[str] | None = None) -> dict:
    spec: dict = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": DEFAULT_FLAVOR,
                        "resources": [
                            {"name": "cpu", "nominalQuota": cpu},
                            {"name": "memory", "nominalQuota": memory},
                        ],
                    }
                ],
            }
        ],
    }
    if admission_checks:
        spec["admissionChecks"] = admission_checks
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": SETUP_CLUSTER_QUEUE},
        "spec": spec,
    }


def local_queue() -> dict:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": SETUP_LOCAL_QUEUE, "namespace": SETUP_NAMESPACE},
        "spec": {"clusterQueue": SETUP_CLUSTER_QUEUE},
    }


def runs_a_multikueue_manager(manager_cluster: dict) -> bool:
    """Our manager or upstream Kueue (which includes its MultiKueue manager) runs on the manager cluster."""
    return MANAGER_COMPONENT in manager_cluster or "upstreamKueue" in manager_cluster


def multikueue_setup_objects(
    workers: list[WorkerSetup], secrets_namespace: str = AGENT_NAMESPACE
) -> list[tuple[str, list[dict]]]:
    """(cluster, objects) to apply, workers first: a worker's queues exist before the manager can
    dispatch to it. Each worker's ClusterQueue offers what its nodes have; the manager's, their sum.
    The worker Secrets go to `secrets_namespace`, where the manager in charge reads them."""
    plan: list[tuple[str, list[dict]]] = [
        (w.name, [resource_flavor(), cluster_queue(w.cpu, w.memory), local_queue()]) for w in workers
    ]
    manager_objects: list[dict] = [resource_flavor()]
    for w in workers:
        manager_objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"{w.name}-secret", "namespace": secrets_namespace},
                "type": "Opaque",
                "data": {"kubeconfig": b64(w.multikueue_kubeconfig.encode())},
            }
        )
    for w in workers:
        manager_objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "MultiKueueCluster",
                "metadata": {"name": multikueue_cluster_name(w.name)},
                "spec": {"kubeConfig": {"locationType": "Secret", "location": f"{w.name}-secret"}},
            }
        )
    manager_objects += [
        {
            "apiVersion": KUEUE_API,
            "kind": "MultiKueueConfig",
            "metadata": {"name": SETUP_MULTIKUEUE_CONFIG},
            "spec": {"clusters": [multikueue_cluster_name(w.name) for w in workers]},
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "AdmissionCheck",
            "metadata": {"name": SETUP_ADMISSION_CHECK},
            "spec": {
                "controllerName": MULTIKUEUE_CONTROLLER,
                "parameters": {
                    "apiGroup": KUEUE_API.split("/")[0],
                    "kind": "MultiKueueConfig",
                    "name": SETUP_MULTIKUEUE_CONFIG,
                },
            },
        },
        cluster_queue(
            sum_quantities(w.cpu for w in workers),
            sum_quantities(w.memory for w in workers),
            admission_checks=[SETUP_ADMISSION_CHECK],
        ),
        local_queue(),
    ]
    plan.append((MANAGER, manager_objects))
    return plan


def sample_job() -> dict:
    """A small Job for user-queue (examples/multikueue/sample-job.yaml); kwok runs its pod on a fake node."""
    return yaml.safe_load(SAMPLE_JOB_FILE.read_text())


def next_steps(localfleet_cmd: str, workers: list[str]) -> str:
    """What to run after setup-multikueue: submit a Job on the manager and watch where it runs."""
    job = yaml.safe_dump(sample_job(), sort_keys=False).rstrip("\n")
    manager = 'kubectl --kubeconfig "$KUBECONFIG_MANAGER"'
    lines = [
        f"MultiKueue is set up: Jobs in {SETUP_NAMESPACE}/{SETUP_LOCAL_QUEUE} on the manager run on "
        f"{' or '.join(workers)} (ClusterQueue {SETUP_CLUSTER_QUEUE}, "
        f"admission check {SETUP_ADMISSION_CHECK}).",
        "",
        "Next steps:",
        "",
        f'eval "$({localfleet_cmd} env)"',
        "",
        "# Submit a Job on the manager:",
        f"{manager} create -f - <<'EOF'",
        job,
        "EOF",
        "",
        "# Watch it: its Workload and Job on the manager, the Job's copy on the worker that runs it:",
        f"{manager} get workloads,jobs -n {SETUP_NAMESPACE}",
        *[
            f'kubectl --kubeconfig "$KUBECONFIG_WORKER{i}" get jobs -n {SETUP_NAMESPACE}'
            for i in range(1, len(workers) + 1)
        ],
        "",
        "# The worker connections, the admission check and the queues:",
        f"{manager} get multikueueclusters,admissionchecks,clusterqueues",
        "",
        "# The setup guide's checks (each prints Active: True):",
        *guide_checks(manager, workers),
    ]
    return "\n".join(lines)


def guide_checks(kubectl: str, workers: list[str]) -> list[str]:
    """The setup guide's commands that print the Active condition of the ClusterQueue (CQ), the
    AdmissionCheck (AC) and each MultiKueueCluster (MC), as one line each."""

    def active(prefix: str, resource: str, name: str) -> str:
        jsonpath = (
            '{range .status.conditions[?(@.type == \\"Active\\")]}'
            f"{prefix} - Active: {{@.status}} Reason: {{@.reason}} Message: {{@.message}}{{'\\n'}}{{end}}"
        )
        return f'{kubectl} get {resource} {name} -o jsonpath="{jsonpath}"'

    return [
        active("CQ", "clusterqueues", SETUP_CLUSTER_QUEUE),
        active("AC", "admissionchecks", SETUP_ADMISSION_CHECK),
        *(active("MC", "multikueuecluster", multikueue_cluster_name(w)) for w in workers),
    ]


def localfleet_command(run_dir: Path) -> str:
    """How the user runs this script again for the same fleet."""
    script = Path("hack/localfleet.py") if Path.cwd().resolve() == REPO else REPO / "hack" / "localfleet.py"
    cmd = f"python3 {script}"
    return cmd if run_dir.resolve() == DEFAULT_RUN_DIR.resolve() else f"{cmd} --dir {run_dir}"


def setup_multikueue(state: State) -> None:
    """Apply the setup guide's objects (idempotent: server-side apply) and print the next steps."""
    clusters = state.data["clusters"]
    if not runs_a_multikueue_manager(clusters.get(MANAGER, {})):
        raise FleetError(
            f"the fleet in {state.run_dir} runs no federation manager: start it with "
            "`up --agents --manager` (or `up --setup-multikueue`), then run setup-multikueue"
        )
    workers = [(name, c) for name, c in clusters.items() if c["role"] == "worker"]
    if not workers:
        raise FleetError(f"the fleet in {state.run_dir} has no workers (`up --workers N`, N >= 1)")
    if len(workers) > MAX_MULTIKUEUE_CLUSTERS:
        raise FleetError(
            f"the fleet in {state.run_dir} has {len(workers)} workers; a MultiKueueConfig lists at most "
            f"{MAX_MULTIKUEUE_CLUSTERS} clusters"
        )
    setups = []
    for name, c in workers:
        path = Path(c.get("multikueueKubeconfig") or state.run_dir / name / "multikueue.kubeconfig")
        if not path.is_file():
            raise FleetError(f"{path} is missing: the manager's identity on {name} was not written")
        capacity = c.get("capacity") or DEFAULT_WORKER_CAPACITY
        setups.append(WorkerSetup(name, capacity["cpu"], capacity["memory"], path.read_text()))
    bins = Binaries(state.data.get("versions") or read_versions())
    log("setting up MultiKueue (the setup guide's objects)")
    secrets_namespace = clusters[MANAGER].get("multikueueSecretsNamespace", AGENT_NAMESPACE)
    for cluster, docs in multikueue_setup_objects(setups, secrets_namespace):
        applied = Kubectl(bins.path("kubectl"), clusters[cluster]["kubeconfig"]).apply(docs)
        log(f"  {cluster}: {', '.join(line.split()[0] for line in applied if line.strip())}")
    print(next_steps(localfleet_command(state.run_dir), [name for name, _ in workers]))


# ----------------------------------------------------------------------------------------------
# sample-lws: the sample LeaderWorkerSet on the manager, every group on one worker
# ----------------------------------------------------------------------------------------------


def sample_lws_manifest(text: str, source: str = "the sample") -> dict:
    """The sample's LeaderWorkerSet, in `default` unless it names a namespace. It must be queued in
    user-queue: without that label Kueue ignores it, and the manager cluster never runs its pods."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as e:
        raise FleetError(f"{source} is not valid YAML: {e}") from None
    lws = next((d for d in docs if isinstance(d, dict) and d.get("kind") == "LeaderWorkerSet"), None)
    if lws is None or not (lws.get("metadata") or {}).get("name"):
        raise FleetError(f"{source} holds no LeaderWorkerSet with a metadata.name")
    lws["metadata"].setdefault("namespace", SETUP_NAMESPACE)
    queue = (lws["metadata"].get("labels") or {}).get(QUEUE_NAME_LABEL)
    if queue != SETUP_LOCAL_QUEUE:
        raise FleetError(
            f"{source}: the LeaderWorkerSet must carry the label {QUEUE_NAME_LABEL}: {SETUP_LOCAL_QUEUE} "
            f"(the fleet's LocalQueue), not {queue!r}"
        )
    return lws


def lws_replicas(lws: dict) -> int:
    value = (lws.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def sample_lws_placement(lws: dict) -> str | None:
    """The fleet worker a manager LWS runs on, once the manager shows every group ready there."""
    cluster = (lws["metadata"].get("annotations") or {}).get(ANNOTATION_WORKER_CLUSTER)
    ready = (lws.get("status") or {}).get("readyReplicas") or 0
    return fleet_worker(cluster) if cluster and ready == lws_replicas(lws) else None


def upstream_lws_placement(state: State, bins: Binaries, lws: dict) -> str | None:
    """Upstream's manager neither annotates a manager LWS with its worker nor mirrors its status:
    the worker is the clusterName all of its Workloads are admitted on, once the LWS there is ready."""
    clusters = state.data["clusters"]
    name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
    manager = Kubectl(bins.path("kubectl"), clusters[MANAGER]["kubeconfig"])
    res = manager("get", "workloads", "-n", namespace, "-o", "json", check=False)
    if res.returncode != 0:
        return None
    owned = [
        wl
        for wl in json.loads(res.stdout)["items"]
        if (wl["metadata"].get("annotations") or {}).get("kueue.x-k8s.io/job-owner-name") == name
    ]
    workers = {(wl.get("status") or {}).get("clusterName") for wl in owned}
    if len(owned) != lws_replicas(lws) or len(workers) != 1 or None in workers:
        return None
    worker = fleet_worker(workers.pop())
    if worker not in clusters:
        return worker  # sample_lws names the unknown worker
    res = Kubectl(bins.path("kubectl"), clusters[worker]["kubeconfig"])(
        "get", "lws", name, "-n", namespace, "-o", "jsonpath={.status.readyReplicas}", check=False
    )
    return worker if res.returncode == 0 and res.stdout.strip() == str(lws_replicas(lws)) else None


def describe_lws_workloads(lws_name: str, workloads: list[dict]) -> str:
    """One line per Workload of the LWS on the manager: conditions, admission checks, cluster."""
    lines = []
    for wl in workloads:
        meta, status = wl["metadata"], wl.get("status") or {}
        if (meta.get("annotations") or {}).get("kueue.x-k8s.io/job-owner-name") != lws_name:
            continue
        conditions = ", ".join(
            f"{c['type']}={c['status']}" + (f" ({c.get('message')})" if c.get("message") else "")
            for c in status.get("conditions") or ()
        )
        checks = ", ".join(
            f"{c['name']}={c.get('state')}" + (f" ({c.get('message')})" if c.get("message") else "")
            for c in status.get("admissionChecks") or ()
        )
        lines.append(
            f"  {meta['name']}: {conditions or 'no conditions'}; checks: {checks or 'none'}; "
            f"clusterName: {status.get('clusterName') or '-'}"
        )
    return "\n".join(lines) or f"  no Workload of {lws_name} on the manager (is the manager's agent running?)"


def sample_lws_next_steps(
    localfleet_cmd: str,
    lws: dict,
    worker: str,
    worker_env_index: int,
    running_pods: int,
    upstream_manager: bool = False,
    jobset: bool = True,
    trainer: bool = True,
) -> str:
    """Where the sample runs and how to look at it from the manager and from its worker; then how to
    run the sample JobSet (when the fleet has the JobSet controller)."""
    name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
    manager = 'kubectl --kubeconfig "$KUBECONFIG_MANAGER"'
    on_worker = f'kubectl --kubeconfig "$KUBECONFIG_WORKER{worker_env_index}"'
    annotation = ANNOTATION_WORKER_CLUSTER.replace(".", "\\.")
    columns = (
        "NAME:.metadata.name,REPLICAS:.spec.replicas,READY:.status.readyReplicas,"
        f"WORKER:.metadata.annotations.{annotation}"
    )
    replicas = lws_replicas(lws)
    return "\n".join(
        [
            f"The sample LeaderWorkerSet {namespace}/{name} runs on {worker}: {replicas}/{replicas} groups "
            f"ready, {running_pods} pods running there "
            + (
                "(on the manager, upstream Kueue keeps the LWS controller's pods scheduling-gated)."
                if upstream_manager
                else "(the manager cluster runs no LWS controller, so no pods)."
            ),
            "",
            f'eval "$({localfleet_cmd} env)"',
            "",
            "# On the manager: the LWS (with the worker's status and the worker's name) and one Workload "
            "per group:",
            f"{manager} get lws,workloads -n {namespace}",
            f"{manager} get lws {name} -n {namespace} -o custom-columns='{columns}'",
            "",
            f"# On {worker}, where it runs: the LWS copy and its pods:",
            f"{on_worker} get lws,pods -n {namespace}",
            "",
            f"# Remove it (the manager removes the copy, its pods and Workloads on {worker}):",
            f"{manager} delete lws {name} -n {namespace}",
            *(
                [
                    "",
                    "# The sample JobSet (a leader and two workers), run through the manager on a worker;",
                    "# its status on the manager ends Completed (docs/jobset.md):",
                    f"{manager} create -f {SAMPLE_JOBSET_FILE.relative_to(REPO)}",
                    f"{manager} get jobsets,workloads -n {namespace}",
                ]
                if jobset
                else []
            ),
            *(
                [
                    "",
                    "# The sample TrainJob (2 nodes of the ClusterTrainingRuntime torch-distributed, on",
                    "# every cluster), run on a worker; it ends Complete on the manager (docs/trainjob.md):",
                    f"{manager} create -f {SAMPLE_TRAINJOB_FILE.relative_to(REPO)}",
                    f"{manager} get trainjobs,workloads -n {namespace}",
                ]
                if jobset and trainer
                else []
            ),
        ]
    )


def sample_lws(state: State, path: Path = SAMPLE_LWS_FILE, timeout: float = SAMPLE_LWS_TIMEOUT) -> str:
    """Create the sample LWS on the manager (server-side apply: again changes nothing), wait until the
    manager's LWS shows every group ready on one worker, and print how to look at it. Returns that
    worker."""
    if not path.is_file():
        raise FleetError(f"no LeaderWorkerSet manifest at {path}")
    clusters = state.data["clusters"]
    if not runs_a_multikueue_manager(clusters.get(MANAGER, {})):
        raise FleetError(
            f"the fleet in {state.run_dir} runs no federation manager: start it with "
            "`up --setup-multikueue`, then run sample-lws"
        )
    workers = [name for name, c in clusters.items() if c["role"] == "worker"]
    lws = sample_lws_manifest(path.read_text(), str(path))
    name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
    bins = Binaries(state.data.get("versions") or read_versions())
    manager = Kubectl(bins.path("kubectl"), clusters[MANAGER]["kubeconfig"])
    t0 = time.monotonic()
    log(f"creating the sample LeaderWorkerSet {namespace}/{name} on the manager ({path})")
    manager.apply([lws])
    found: dict = {}

    upstream_manager = "upstreamKueue" in clusters[MANAGER]

    def placed() -> bool:
        if upstream_manager:
            found["worker"] = upstream_lws_placement(state, bins, lws)
            return found["worker"] is not None
        res = manager("get", "lws", name, "-n", namespace, "-o", "json", check=False)
        found["worker"] = sample_lws_placement(json.loads(res.stdout)) if res.returncode == 0 else None
        return found["worker"] is not None

    try:
        wait_for(
            f"the manager's LWS {namespace}/{name} to show readyReplicas={lws_replicas(lws)} and "
            f"the annotation {ANNOTATION_WORKER_CLUSTER}",
            placed,
            timeout,
            interval=1,
            procs=[p for p in state.data["processes"] if p["component"] in KUEUE_COMPONENTS],
        )
    except FleetError as e:
        res = manager("get", "workloads", "-n", namespace, "-o", "json", check=False)
        items = json.loads(res.stdout)["items"] if res.returncode == 0 else []
        raise FleetError(
            f"{e}\nits Workloads on the manager:\n{describe_lws_workloads(name, items)}\n"
            f"logs: {state.run_dir}/{MANAGER}/{MANAGER_COMPONENT}.log, <cluster>/{AGENT_COMPONENT}.log"
        ) from None
    worker = found["worker"]
    if worker not in workers:
        raise FleetError(f"the manager's LWS names {worker!r} as its worker, which is not one of {workers}")
    pods = Kubectl(bins.path("kubectl"), clusters[worker]["kubeconfig"]).get_json(
        "pods", "-n", namespace, "-l", f"{LWS_NAME_LABEL}={name}"
    )["items"]
    running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
    log(f"the sample LeaderWorkerSet is ready on {worker} after {fmt_duration(time.monotonic() - t0)}")
    steps = sample_lws_next_steps(
        localfleet_command(state.run_dir),
        lws,
        worker,
        workers.index(worker) + 1,
        running,
        upstream_manager,
        jobset=(state.data.get("options") or {}).get("jobset", True),
        trainer=(state.data.get("options") or {}).get("trainer", True),
    )
    print(steps)
    return worker
