"""Our processes on the fleet: the worker_agent (`up --agents`, or `--webhooks-only` for the CRDs'
conversion webhook) on every cluster and the federation manager (`up --manager`) on the manager
cluster, with their configurations, webhook configurations and the agents' visibility API.
`OurProcesses` is the part of `localfleet.fleet.FleetUp` that starts them."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import yaml

from localfleet.binaries import Binaries
from localfleet.cluster import ClusterPlan, FleetOptions
from localfleet.common import (
    AGENT_COMPONENT,
    AGENT_FRAMEWORKS,
    AGENT_NAMESPACE,
    DISPATCHERS,
    MANAGER,
    MANAGER_COMPONENT,
    MULTIKUEUE_ORIGIN,
    REPO,
    WEBHOOKS_COMPONENT,
    FleetError,
    write_file,
)
from localfleet.kube import Kubectl, apiservice_available, http_ok, tls_port_open
from localfleet.multikueue import resource_flavor
from localfleet.ports import free_port
from localfleet.processes import State, project_env, project_python, wait_for

OUR_WEBHOOKS = REPO / "deploy" / "webhooks"
CONVERT_PATH = "/convert"  # the worker_agent's CRD conversion webhook
# The agent's visibility API (worker_agent/visibility.py): an APIService per version, on a Service of
# type ExternalName, which the aggregator resolves to https://<externalName>:<APIService port>.
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")
VISIBILITY_SERVICE = "kueue-visibility-server"
AGENT_SECRET = "kueue-webhook-server-cert"  # the agent's default internalCertManagement.webhookSecretName
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
MANAGER_LEASE = "kueue-federation-manager"
# Upstream's test/e2e/config/multikueue/* Configurations turn these on (alpha gates we implement).
CONFORMANCE_GATES = {"MultiKueueManagerQuotaAutomation": True}


class OurProcesses:
    """FleetUp's steps for our processes (see localfleet.fleet.FleetUp for the attributes they use)."""

    opts: FleetOptions
    bins: Binaries
    state: State
    clusters: list[ClusterPlan]

    def local_conversion(self, c: ClusterPlan, crds: list[dict]) -> list[dict]:
        """`crds` with their conversion webhook (deploy/crds: the agent's Service) turned into a URL
        on this cluster's local agent; the agent injects its CA bundle once it runs."""
        port = c.ports.setdefault("agent-webhook", free_port())
        out = []
        for crd in crds:
            if (crd["spec"].get("conversion") or {}).get("webhook") is not None:  # only those are copied
                crd = copy.deepcopy(crd)
                crd["spec"]["conversion"]["webhook"]["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{CONVERT_PATH}"
                }
            out.append(crd)
        return out

    def agent_python(self) -> str:
        """The project's .venv interpreter (the agent needs aiohttp, structlog, ... besides PyYAML)."""
        return checked_python("worker_agent", "import worker_agent.agent", REPO)

    def agent_config(self, c: ClusterPlan) -> dict:
        """A v1beta1 Configuration: leader election in kueue-system, everything on 127.0.0.1."""
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta1",
            "kind": "Configuration",
            "namespace": AGENT_NAMESPACE,
            "leaderElection": {"leaderElect": True, "resourceNamespace": AGENT_NAMESPACE},
            "metrics": {"bindAddress": f"127.0.0.1:{c.ports['agent-metrics']}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{c.ports['agent-health']}"},
            "webhook": {
                "host": "127.0.0.1",
                "port": c.ports["agent-webhook"],
                "certDir": str(c.dir / "webhook-certs"),
            },
            "internalCertManagement": {"enable": True, "webhookSecretName": AGENT_SECRET},
            "integrations": {"frameworks": AGENT_FRAMEWORKS},
            **self.client_connection(),
            **self.conformance_gates(),
        }

    def conformance_gates(self) -> dict:
        """`featureGates` of a conformance fleet (`up --conformance`): the gates upstream's MultiKueue e2e
        configurations turn on for the specs that apply to us."""
        return {"featureGates": dict(CONFORMANCE_GATES)} if self.opts.conformance else {}

    def client_connection(self) -> dict:
        """`clientConnection` for our Configurations when `up --client-qps/--client-burst` asks for one."""
        settings = {"qps": self.opts.client_qps, "burst": self.opts.client_burst}
        settings = {k: v for k, v in settings.items() if v is not None}
        return {"clientConnection": settings} if settings else {}

    def process_args(self) -> list[str]:
        """`--event-types` and `--event-loop` for our processes when `up` is given them."""
        return [
            *([f"--event-types={self.opts.event_types}"] if self.opts.event_types else []),
            *([f"--event-loop={self.opts.event_loop}"] if self.opts.event_loop else []),
        ]

    def agent_clusters(self) -> list[ClusterPlan]:
        """The clusters our worker_agent runs on: all but those running upstream Kueue."""
        return [c for c in self.clusters if not self.runs_upstream(c)]

    def start_agents(self, webhooks_only: bool = False) -> None:
        """One `python -m worker_agent` per cluster; once each is ready, our webhook configurations
        (URL clientConfig, CA bundle from the agent's Secret; the agent keeps it up to date) and a
        ResourceFlavor `default-flavor`. With `webhooks_only` (a fleet without agents, as the test
        fleet): `worker_agent --webhooks-only`, which runs no controllers and serves the CRDs'
        conversion webhook, so v1beta1 clients work; no admission webhooks are registered."""
        component = WEBHOOKS_COMPONENT if webhooks_only else AGENT_COMPONENT
        what = (
            "the conversion webhook (worker_agent --webhooks-only)" if webhooks_only else "the worker_agent"
        )
        self.step(f"starting {what} on every cluster")
        python = self.agent_python()
        for c in self.agent_clusters():
            for name in ("agent-metrics", "agent-health", "agent-webhook", "agent-visibility"):
                c.ports.setdefault(name, free_port())  # the webhook's is chosen with the CRDs
            cfg = write_file(c.dir / "worker-agent-config.yaml", yaml.safe_dump(self.agent_config(c)), 0o644)
            self.state.cluster(c.name)["agent" if not webhooks_only else "webhooks"] = {
                "config": str(cfg),
                "health": f"http://127.0.0.1:{c.ports['agent-health']}",
                "metrics": f"https://127.0.0.1:{c.ports['agent-metrics']}/metrics",
                "webhook": f"https://127.0.0.1:{c.ports['agent-webhook']}",
                **(
                    {}
                    if webhooks_only
                    else {"visibility": f"https://127.0.0.1:{c.ports['agent-visibility']}"}
                ),
            }
            self.state.start(
                c.name,
                component,
                [
                    python,
                    "-m",
                    "worker_agent",
                    f"--kubeconfig={c.dir / 'admin.kubeconfig'}",
                    f"--config={cfg}",
                    "--log-format=console",
                    *self.process_args(),
                    *(
                        ["--webhooks-only"]
                        if webhooks_only
                        else [f"--visibility-bind-address=127.0.0.1:{c.ports['agent-visibility']}"]
                    ),
                ],
                env=project_env(),
            )
        for c in self.agent_clusters():
            procs = self.procs(c.name, component)
            wait_for(
                f"{c.name} {component} /readyz",
                lambda c=c: http_ok(f"http://127.0.0.1:{c.ports['agent-health']}/readyz"),
                90,
                interval=0.5,
                procs=procs,
            )
            try:
                wait_for(
                    f"{c.name} {component} webhook TLS port",
                    lambda c=c: tls_port_open(c.ports["agent-webhook"]),
                    30,
                    procs=procs,
                )
            except FleetError as e:
                raise FleetError(
                    f"{e}: the worker_agent is ready but serves no webhooks on 127.0.0.1:"
                    f"{c.ports['agent-webhook']} (is setup_webhooks wired into worker_agent/agent.py?); "
                    f"log {procs[0]['log']}"
                ) from e
            kubectl = self.kubectl(c)
            ca_bundle = self.agent_ca_bundle(kubectl)
            self.wait_conversion_ca(c, kubectl, ca_bundle, component)
            if webhooks_only:
                continue
            kubectl.apply(self.agent_webhook_configs(c, ca_bundle))
            kubectl.apply(visibility_api_objects(c.ports["agent-visibility"], ca_bundle))
            kubectl.apply([resource_flavor()])
        for c in self.agent_clusters():
            if not webhooks_only:
                self.wait_visibility_available(c)
        self.state.save()

    def wait_visibility_available(self, c: ClusterPlan) -> None:
        """Until the aggregator has reached the agent's visibility API (APIService Available)."""
        kubectl = self.kubectl(c)

        def available() -> bool:
            return all(apiservice_available(kubectl, f"{v}.{VISIBILITY_GROUP}") for v in VISIBILITY_VERSIONS)

        wait_for(
            f"{c.name}: APIService {VISIBILITY_GROUP} Available",
            available,
            120,
            interval=0.5,
            procs=self.procs(c.name, AGENT_COMPONENT),
        )

    def wait_conversion_ca(self, c: ClusterPlan, kubectl: Kubectl, ca_bundle: str, component: str) -> None:
        """Until the agent has put its CA into our CRDs' conversion webhook, v1beta1 requests fail."""

        def injected() -> bool:
            crds = kubectl.get_json("crd", "-l", "app.kubernetes.io/part-of=kueue-federation")
            configs = [
                ((i["spec"].get("conversion") or {}).get("webhook") or {}).get("clientConfig") or {}
                for i in crds.get("items", [])
            ]
            return bool(configs) and all(cfg.get("caBundle") == ca_bundle for cfg in configs)

        wait_for(
            f"{c.name}: the CRDs' conversion webhook CA",
            injected,
            60,
            procs=self.procs(c.name, component),
        )

    def agent_ca_bundle(self, kubectl: Kubectl) -> str:
        """The CA the agent keeps in its Secret (base64, as caBundle wants it)."""
        found: dict[str, str] = {}

        def present() -> bool:
            res = kubectl("get", "secret", "-n", AGENT_NAMESPACE, AGENT_SECRET, "-o", "json", check=False)
            if res.returncode == 0:
                found["ca"] = (json.loads(res.stdout).get("data") or {}).get("ca.crt", "")
            return bool(found.get("ca"))

        wait_for(f"Secret {AGENT_NAMESPACE}/{AGENT_SECRET}", present, 30)
        return found["ca"]

    def agent_webhook_configs(self, c: ClusterPlan, ca_bundle: str) -> list[dict]:
        """deploy/webhooks with each Service clientConfig turned into a URL on the local agent."""
        docs = []
        for f in sorted(OUR_WEBHOOKS.glob("*.yaml")):
            docs += [d for d in yaml.safe_load_all(f.read_text()) if d and d.get("kind") in WEBHOOK_KINDS]
        for doc in docs:
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{c.ports['agent-webhook']}{path}",
                    "caBundle": ca_bundle,
                }
        return docs

    # -- our federation manager (--manager) ------------------------------------------------------

    def manager_python(self, env: dict[str, str]) -> str:
        """The project's interpreter, checked to find `python -m manager` as the process will run it."""
        code = "import importlib.util as u, sys; sys.exit(0 if u.find_spec('manager.__main__') else 3)"
        return checked_python("manager", code, self.opts.run_dir / MANAGER, env)

    def manager_config(self, c: ClusterPlan) -> dict:
        """A v1beta1 Configuration for `python -m manager`: its own Lease, MultiKueue's defaults, and
        the agents' frameworks (the manager has a MultiKueue adapter only for enabled integrations)."""
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta1",
            "kind": "Configuration",
            "namespace": AGENT_NAMESPACE,
            "leaderElection": {
                "leaderElect": True,
                "resourceName": MANAGER_LEASE,
                "resourceNamespace": AGENT_NAMESPACE,
            },
            "metrics": {"bindAddress": f"127.0.0.1:{c.ports['manager-metrics']}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{c.ports['manager-health']}"},
            "multiKueue": {
                "gcInterval": "1m",
                "origin": MULTIKUEUE_ORIGIN,
                "workerLostTimeout": self.opts.worker_lost_timeout,
                **self.dispatcher_setting(),
            },
            "integrations": {"frameworks": AGENT_FRAMEWORKS},
            **self.client_connection(),
            **self.conformance_gates(),
        }

    def dispatcher_setting(self) -> dict:
        return {"dispatcherName": DISPATCHERS[self.opts.dispatcher]} if self.opts.dispatcher else {}

    def start_manager(self) -> None:
        """One `python -m manager` on the manager cluster. It creates no MultiKueue objects:
        `setup-multikueue` does."""
        self.step("starting the federation manager on the manager cluster")
        c = next(c for c in self.clusters if c.name == MANAGER)
        env = project_env()
        python = self.manager_python(env)
        for name in ("manager-metrics", "manager-health"):
            c.ports[name] = free_port()
        config = self.manager_config(c)
        cfg = write_file(c.dir / "manager-config.yaml", yaml.safe_dump(config), 0o644)
        # Where it reads the worker Secrets: its config namespace.
        self.state.cluster(c.name)["multikueueSecretsNamespace"] = config["namespace"]
        self.state.cluster(c.name)["manager"] = {
            "config": str(cfg),
            "health": f"http://127.0.0.1:{c.ports['manager-health']}",
            "metrics": f"https://127.0.0.1:{c.ports['manager-metrics']}/metrics",
        }
        record = self.state.start(
            c.name,
            MANAGER_COMPONENT,
            [
                python,
                "-m",
                "manager",
                f"--kubeconfig={c.dir / 'admin.kubeconfig'}",
                f"--config={cfg}",
                f"--metrics-bind-address={config['metrics']['bindAddress']}",
                f"--health-probe-bind-address={config['health']['healthProbeBindAddress']}",
                "--log-format=console",
                *self.process_args(),
            ],
            env=env,
        )
        wait_for(
            f"{c.name} manager /readyz",
            lambda: http_ok(f"http://127.0.0.1:{c.ports['manager-health']}/readyz"),
            90,
            interval=0.5,
            procs=[record],
        )


def visibility_api_objects(port: int, ca_bundle: str) -> list[dict]:
    """The Service and APIServices that put the agent's visibility API (on 127.0.0.1:`port`) behind a
    local apiserver. A Service of type ExternalName: with --enable-aggregator-routing off (the
    default) the aggregator resolves it to https://<externalName>:<the APIService's port> and checks
    the certificate for <service>.<namespace>.svc, which the agent's certificate names."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": VISIBILITY_SERVICE, "namespace": AGENT_NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    }
    apiservices = [
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{version}.{VISIBILITY_GROUP}"},
            "spec": {
                "group": VISIBILITY_GROUP,
                "version": version,
                "groupPriorityMinimum": 100,
                "versionPriority": 100 if version == VISIBILITY_VERSIONS[0] else 90,
                "service": {"name": VISIBILITY_SERVICE, "namespace": AGENT_NAMESPACE, "port": port},
                "caBundle": ca_bundle,
            },
        }
        for version in VISIBILITY_VERSIONS
    ]
    return [service, *apiservices]


def checked_python(package: str, code: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """project_python(), once `code` has run there as the process will (cwd, env): exit 3 means no
    <package>/__main__.py, any other failure that the project's .venv needs `make venv`."""
    python = project_python()
    check = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, cwd=cwd, env={**os.environ, **(env or {})}
    )
    if check.returncode == 3:
        raise FleetError(f"{python} finds no {package}/__main__.py: `python -m {package}` cannot run yet")
    if check.returncode != 0:
        raise FleetError(
            f"{python} cannot import {package} ({check.stderr.strip().splitlines()[-1:]}); "
            "run `make venv` and retry"
        )
    return python
