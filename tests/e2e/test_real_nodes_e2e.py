"""Real containers on real nodes (`localfleet up --real-nodes 1`, docs/local-fleet.md): a Job submitted
on the manager runs as a container on a worker's real node (containerd + kubelet), its exit reaches
the manager (Complete there, the pod's log readable through the worker's apiserver); a container
that exits 3 makes the Job Failed on the manager, exit code 3 on the worker; `down` leaves no
process, mount (network namespaces included: containerd keeps them under its state directory),
cgroup, bridge or log link behind, and kubelet's kernel settings are back as they were.

Real nodes need root and Debian's packages (localfleet.realnodes.PACKAGES). Without them this module
fails, saying what is missing; KF_SKIP_REAL_NODES=1 skips it instead (for machines without root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_kit import (
    LOCALFLEET,
    MANAGER,
    NAMESPACE,
    QUEUE,
    REPO,
    Fleet,
    is_true,
    own_fleet,
    unique,
    wait_until,
)

from localfleet import nodehost, realnodes

# The fixture builds nothing (hack/run-tests.sh builds first), but a first `make image` makes its base.
pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(900)]
SKIP_ENV = "KF_SKIP_REAL_NODES"


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    problems = realnodes.host_problems()
    if problems and os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: real nodes not tested ({'; '.join(problems)})")
    if problems:
        pytest.fail(
            f"real nodes cannot run here: {'; '.join(problems)}. Install as root: apt-get install "
            f"{realnodes.PACKAGES}; or set {SKIP_ENV}=1 to skip these tests",
            pytrace=False,
        )
    with own_fleet("kf-real-nodes-", "--real-nodes", "1", keep_logs_env="KF_KEEP_LOGS") as f:
        yield f


def real_job(name: str, script: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    **realnodes.REAL_NODE_SCHEDULING,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "main",
                            "image": realnodes.busybox_image(),
                            "command": ["sh", "-c", script],
                            "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}},
                        }
                    ],
                }
            },
        },
    }


def localfleet_base(fleet: Fleet) -> list[str]:
    return [sys.executable, str(LOCALFLEET), "--dir", str(fleet.run_dir)]


def finished(fleet: Fleet, name: str, ctype: str) -> dict | None:
    job = fleet.get(MANAGER, "job", name)
    return job if job and is_true(job, ctype) else None


class PodWatch:
    """Every version of a Job's pods on every worker (`kubectl get pods -w`): MultiKueue deletes the
    worker's copy, pods included, once the manager has the Job finished."""

    def __init__(self, fleet: Fleet, job: str) -> None:
        self.procs = {
            w: subprocess.Popen(
                [
                    fleet.kubectl_binary,
                    "--kubeconfig",
                    fleet.state["clusters"][w]["kubeconfig"],
                    "get",
                    "pods",
                    "-n",
                    NAMESPACE,
                    "-l",
                    f"job-name={job}",
                    "-w",
                    "-o",
                    "json",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for w in fleet.workers
        }

    def last(self) -> tuple[str, dict]:
        """The worker that ran the pod, and the pod's last version seen there."""
        found = []
        for worker, proc in self.procs.items():
            proc.terminate()
            out, _ = proc.communicate(timeout=30)
            decoder, text, pos = json.JSONDecoder(), out.strip(), 0
            while pos < len(text):
                obj, pos = decoder.raw_decode(text, pos)
                pos = len(text) - len(text[pos:].lstrip())
                found.append((worker, obj))
        assert found, "no pod of the Job was seen on any worker"
        assert len({(w, p["metadata"]["name"]) for w, p in found}) == 1, "more than one pod"
        return found[-1]


def terminated(pod: dict) -> dict:
    (status,) = pod["status"]["containerStatuses"]
    return status["state"].get("terminated") or {}


def test_status_shows_the_real_nodes_ready(fleet):
    nodes = fleet.state["realNodes"]["nodes"]
    assert sorted(n["name"] for n in nodes) == sorted(f"{w}-real-0" for w in fleet.workers)
    for n in nodes:
        node = fleet.json(n["cluster"], "get", "node", n["name"])
        assert node["metadata"]["labels"][realnodes.REAL_NODE_KEY] == "true"
        assert {"key": realnodes.REAL_NODE_KEY, "value": "true", "effect": "NoSchedule"} in node["spec"][
            "taints"
        ]
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
        assert node["status"]["nodeInfo"]["kubeletVersion"] == f"v{fleet.state['versions']['K8S_VERSION']}"
        assert {"type": "InternalIP", "address": n["ip"]} in node["status"]["addresses"]
    status = subprocess.run(
        [*localfleet_base(fleet), "status"], capture_output=True, text=True, check=True
    ).stdout
    for n in nodes:
        assert any(
            line.split()[:4] == [n["name"], n["cluster"], n["ip"], "Ready"] for line in status.splitlines()
        )
        assert f"kubelet-{n['name']}" in status and f"containerd-{n['name']}" in status


def test_a_job_runs_as_a_real_container_and_completes_on_the_manager(fleet):
    name = unique("real-echo")
    watch = PodWatch(fleet, name)
    fleet.create(MANAGER, real_job(name, "echo done; sleep 4"))

    def log_read() -> str | None:
        # Read through the worker's apiserver, which asks the node's kubelet for it.
        for worker in fleet.workers:
            for pod in fleet.items(worker, "pods", "-l", f"job-name={name}"):
                if pod["status"].get("phase") == "Running":
                    res = subprocess.run(
                        [fleet.kubectl_binary, "--kubeconfig", fleet.state["clusters"][worker]["kubeconfig"],
                         "logs", "-n", NAMESPACE, pod["metadata"]["name"]],
                        capture_output=True, text=True, timeout=30,
                    )  # fmt: skip
                    return res.stdout.strip() or None
        return None

    assert wait_until(f"the log of Job {name}'s pod", log_read, 120, interval=0.3) == "done"
    wait_until(f"Job {name} Complete on the manager", lambda: finished(fleet, name, "Complete"), 120)
    worker, pod = watch.last()
    assert pod["spec"]["nodeName"] == f"{worker}-real-0"
    assert pod["status"]["phase"] == "Succeeded"
    assert terminated(pod)["exitCode"] == 0
    assert terminated(pod)["reason"] == "Completed"


def test_a_failing_container_fails_the_job_on_the_manager(fleet):
    name = unique("real-exit3")
    watch = PodWatch(fleet, name)
    fleet.create(MANAGER, real_job(name, "echo failing; exit 3"))
    job = wait_until(f"Job {name} Failed on the manager", lambda: finished(fleet, name, "Failed"), 180)
    assert not is_true(job, "Complete")
    worker, pod = watch.last()
    assert pod["spec"]["nodeName"] == f"{worker}-real-0"
    assert pod["status"]["phase"] == "Failed"
    assert terminated(pod)["exitCode"] == 3
    assert terminated(pod)["reason"] == "Error"


def test_our_image_imports_and_its_packages_run_in_a_real_pod(fleet, tmp_path):
    """`make image`'s script (buildah over an mmdebstrap base here: no Docker, no registry), the tar
    imported with `load-image` (ctr -n k8s.io images import), then a pod of it on a real node."""
    tar = tmp_path / "kueue-federation.tar"
    built = subprocess.run(
        ["bash", str(REPO / "hack" / "build-image.sh"), str(tar)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    loaded = subprocess.run(
        [*localfleet_base(fleet), "load-image", str(tar)], capture_output=True, text=True, timeout=300
    )
    assert loaded.returncode == 0, loaded.stderr
    worker = fleet.workers[0]
    name = unique("our-image")
    script = "import os, worker_agent, manager; print('imported as uid', os.getuid())"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            **realnodes.REAL_NODE_SCHEDULING,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": f"kueue-federation:{project_version()}",
                    "imagePullPolicy": "Never",
                    "args": ["-c", script],
                }
            ],
        },
    }
    fleet.create(worker, pod)
    done = wait_until(
        f"pod {name} finished",
        lambda: (
            (p := fleet.get(worker, "pod", name))
            and p["status"].get("phase") in ("Succeeded", "Failed")
            and p
        ),
        120,
    )
    logs = fleet.kubectl(worker, "logs", "-n", NAMESPACE, name)
    assert done["status"]["phase"] == "Succeeded", logs
    assert done["spec"]["nodeName"] == f"{worker}-real-0"
    assert logs.strip() == "imported as uid 65532"


def project_version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("no version in pyproject.toml")


def test_down_leaves_nothing_behind(fleet):
    info = fleet.state["realNodes"]
    run_dir = fleet.run_dir.resolve()
    subprocess.run([*localfleet_base(fleet), "down"], capture_output=True, text=True, check=True)
    assert not run_dir.exists()
    leftovers = []
    mine = {os.getpid(), os.getppid()}  # a test run started with the run directory in its arguments
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) not in mine:
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(run_dir) in cmdline:
                leftovers.append(f"process {proc.name}: {cmdline[:200]}")
    leftovers += [f"mount {m}" for m in nodehost.mounts_under(run_dir)]
    for h in nodehost.cgroup_hierarchies():
        if (h / info["cgroup"].strip("/")).exists():
            leftovers.append(f"cgroup {h / info['cgroup'].strip('/')}")
    if subprocess.run(["ip", "link", "show", info["bridge"]], capture_output=True).returncode == 0:
        leftovers.append(f"bridge {info['bridge']}")
    if nodehost.CONTAINER_LOGS.is_dir():
        for link in nodehost.CONTAINER_LOGS.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(str(run_dir)):
                leftovers.append(f"log link {link}")
    assert not leftovers, "\n".join(leftovers)
    before = json.loads(nodehost.SYSCTL_FILE.read_text())
    now = {k: (Path("/proc/sys") / k).read_text().strip() for k in before}
    assert now == before, "kubelet's kernel settings were not put back"
