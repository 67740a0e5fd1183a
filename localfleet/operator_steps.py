"""The other projects' controllers a fleet runs (LeaderWorkerSet, JobSet, Kubeflow Trainer, Kubeflow's
training-operator, the MPI Operator) with
their webhooks, and the smoke check of an LWS on a worker. `OperatorSteps` is the part of
`localfleet.fleet.FleetUp` that starts them (localfleet.operators describes each one)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from localfleet.binaries import Binaries
from localfleet.cluster import ClusterPlan, FleetOptions
from localfleet.common import MANAGER, REPO, FleetError, b64, write_file
from localfleet.kube import http_ok, tls_port_open
from localfleet.operators import JOBSET, LWS, OPERATORS, TRAINER, Operator
from localfleet.pki import CertificateAuthority
from localfleet.processes import State, wait_for

# A ClusterTrainingRuntime the fleet installs everywhere (with Trainer) and a TrainJob of it.
TRAINING_RUNTIME_FILE = REPO / "examples" / "multikueue" / "training-runtime.yaml"


class OperatorSteps:
    """FleetUp's steps for the other projects' controllers (see localfleet.fleet.FleetUp for the
    attributes they use)."""

    opts: FleetOptions
    bins: Binaries
    state: State
    clusters: list[ClusterPlan]
    ca: CertificateAuthority

    # -- LeaderWorkerSet and JobSet controllers ----------------------------------------------------

    def runs_lws(self, c: ClusterPlan) -> bool:
        """Workers run the LWS and JobSet controllers; so does a manager running upstream Kueue, whose
        MultiKueue setup has them installed on the manager: only their webhooks default a manager LWS
        or JobSet there. (On our manager a JobSet is defaulted on the worker it runs on.)"""
        return self.runs_pods(c) or (c.name == MANAGER and self.runs_upstream(c))

    def operators(self) -> list[Operator]:
        """The other projects' controllers this fleet runs (`up --no-operator KEY` leaves one out, and
        those that require it; `--no-jobset` and `--no-trainer` are two of them)."""
        left_out = set(self.opts.left_out)
        if not self.opts.jobset:
            left_out.add(JOBSET.key)
        if not self.opts.trainer:
            left_out.add(TRAINER.key)
        return [op for op in OPERATORS if op.key not in left_out and op.requires not in left_out]

    def operator_crds(self) -> list[Path]:
        return [p for op in self.operators() for p in self.bins.operator_crds(op)]

    def start_lws(self) -> None:
        """The LeaderWorkerSet and JobSet controllers, with their webhooks, where `runs_lws` says."""
        workers = [c for c in self.clusters if self.runs_lws(c)]
        if not workers:  # `up --workers 0`: a manager cluster only
            return
        ops = self.operators()
        names = [f"the {op.title} controller" for op in ops]
        titles = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        self.step(f"starting {titles} on {', '.join(c.name for c in workers)}")
        for c in workers:
            for op in ops:
                self.kubectl(c)("create", "namespace", op.namespace, check=False)
                ports = (c.ports[f"{op.key}-webhook"], c.ports[f"{op.key}-health"], str(op.cert_dir(c.dir)))
                config = op.config(*ports)
                cfg = None
                if config is not None:
                    cfg = write_file(c.dir / f"{op.key}-config.yaml", yaml.safe_dump(config), 0o644)
                op.prepare(self.kubectl(c), c.dir)
                for component, argv in op.companions(c.dir, c.ports):
                    self.state.start(c.name, component, argv, env={"PYTHONPATH": str(REPO)})
                self.state.start(
                    c.name,
                    op.binary,
                    [str(self.bins.path(op.binary)), *op.args(cfg, *ports)],
                    env={"KUBECONFIG": str(c.dir / "admin.kubeconfig"), **op.process_env(c.dir, c.ports)},
                )
        for c in workers:
            for op in ops:
                if op.webhooks is None:
                    continue
                wait_for(
                    f"{c.name} {op.title} webhook TLS port",
                    lambda c=c, op=op: tls_port_open(c.ports[f"{op.key}-webhook"]),
                    60,
                    procs=self.procs(c.name, op.binary),
                )
                if op.readyz:
                    wait_for(
                        f"{c.name} {op.title} readyz",
                        lambda c=c, op=op: http_ok(f"http://127.0.0.1:{c.ports[f'{op.key}-health']}/readyz"),
                        120,
                        procs=self.procs(c.name, op.binary),
                    )
                self.kubectl(c).apply(self.operator_webhook_configs(c, op))
        if TRAINER in ops:
            self.install_training_runtimes()

    def install_training_runtimes(self) -> None:
        """The sample's ClusterTrainingRuntime on every cluster: workers run TrainJobs from it, and a
        manager's Kueue derives a TrainJob's PodSets from it."""
        docs = [
            d
            for d in yaml.safe_load_all(TRAINING_RUNTIME_FILE.read_text())
            if d and d.get("kind") == "ClusterTrainingRuntime"
        ]
        names = ", ".join(d["metadata"]["name"] for d in docs)
        self.step(f"installing the ClusterTrainingRuntime {names} everywhere")
        for c in self.clusters:
            self.kubectl(c).apply(yaml.safe_dump_all(docs))

    def operator_webhook_configs(self, c: ClusterPlan, op: Operator) -> list[dict]:
        docs = [d for d in yaml.safe_load_all(self.bins.operator_webhooks(op).read_text()) if d]
        return op.webhook_configs(docs, c.ports[f"{op.key}-webhook"], b64(self.ca.cert_pem))

    def lws_webhook_configs(self, c: ClusterPlan) -> list[dict]:
        """LWS's webhook manifests, pointed at the local process and its CA (as envtest rewrites them)."""
        docs = [d for d in yaml.safe_load_all(self.bins.lws_webhooks.read_text()) if d]
        return LWS.webhook_configs(docs, c.ports["lws-webhook"], b64(self.ca.cert_pem))

    # -- smoke check ----------------------------------------------------------------------------

    def smoke_check(self) -> None:
        worker = next((c for c in self.clusters if c.is_worker), None)
        if worker is None:
            return
        self.step(f"smoke check: an LWS (replicas 1, size 2) on {worker.name} must become ready")
        kubectl = self.kubectl(worker)
        lws = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "localfleet-smoke", "namespace": "default"},
            "spec": {
                "replicas": 1,
                "leaderWorkerTemplate": {
                    "size": 2,
                    "workerTemplate": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"requests": {"cpu": "100m"}},
                                }
                            ]
                        }
                    },
                },
            },
        }
        kubectl("apply", "-f", "-", input=json.dumps(lws))

        def ready() -> bool:
            res = kubectl(
                "get", "lws", "localfleet-smoke", "-o", "jsonpath={.status.readyReplicas}", check=False
            )
            return res.stdout.strip() == "1"

        try:
            wait_for(
                "the smoke LWS to reach readyReplicas=1",
                ready,
                120,
                interval=1,
                procs=[p for p in self.state.data["processes"] if p["cluster"] == worker.name],
            )
        except FleetError as e:
            pods = kubectl("get", "pods", "-o", "wide", check=False).stdout
            raise FleetError(f"{e}\npods on {worker.name}:\n{pods}") from e
        kubectl("delete", "lws", "localfleet-smoke", "--wait=true", "--timeout=60s")
        self.step("smoke check passed")
