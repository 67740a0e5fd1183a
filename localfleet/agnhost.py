"""Pods that behave like upstream Kueue's e2e test image (agnhost), for `up --conformance`.

kwok runs no container, so a pod of the fleet never ends by itself. Upstream Kueue's e2e suites
(`make conformance`, docs/conformance.md) run agnhost with one of three behaviours and end a running
pod by exec'ing `curl http://<pod IP>:8080/exit?code=N` in it. A conformance fleet honours both:

- a pod whose first container's first argument is `entrypoint-tester` (agnhost's "print and exit
  0") succeeds about a second after it is Ready (stage `agnhost-exit-fast`);
- kwok answers `pods/exec` locally (a ClusterExec) with `curl` on PATH being `curl_stand_in`
  below: `/readyz` and `/healthz` answer "ok"; `/exit?code=N` annotates the pod whose IP the URL
  names with EXIT_CODE_ANNOTATION, and kwok then ends it with that exit code (stage
  `agnhost-exit-on-request`: Succeeded for 0, Failed otherwise);
- KubeRay's submitter pod (first container with `RAY_JOB_SUBMISSION_ID`) succeeds about a second after it
  is Ready, its `ray job submit` answered by the Ray dashboard stand-in (localfleet/raydashboard.py);
- every other running pod runs until it is deleted (there is no `pod-complete` stage);
- a pod that stands for processes of the fleet becomes Ready only when the harness says they are
  (`ready_stages`).

Everything here is text written into a cluster's directory when kwok starts."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import yaml

EXIT_CODE_ANNOTATION = "kueue-federation.dev/exit-code"
EXIT_FAST_ARG = "entrypoint-tester"
# KubeRay gives its submitter pod's first container this variable (the Ray job's id), whatever the
# RayJob's submitterPodTemplate names that container.
RAY_SUBMISSION_ID_ENV = "RAY_JOB_SUBMISSION_ID"
# A pod that stands for processes of the fleet (conformance/environment.py) becomes Ready only once it
# also carries PROCESSES_READY_ANNOTATION, which the conformance harness sets when those processes
# answer /readyz: so the Deployment it belongs to is Available only while they are.
STANDS_FOR_ANNOTATION = "kueue-federation.dev/stands-for"
PROCESSES_READY_ANNOTATION = "kueue-federation.dev/processes-ready"

_RUNNING = [
    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
]

# A pod's status once its container ended, as a kubelet writes it: conditions in the kubelet's order,
# replaced whole (a JSON merge patch), the container terminated with the exit code.
_TERMINATED = """\
{{{{ $now := Now }}}}
conditions:
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "False"
  type: PodReadyToStartContainers
- lastTransitionTime: {{{{ $now | Quote }}}}
  reason: {reason}
  status: "True"
  type: Initialized
- lastTransitionTime: {{{{ $now | Quote }}}}
  reason: {reason}
  status: "False"
  type: Ready
- lastTransitionTime: {{{{ $now | Quote }}}}
  reason: {reason}
  status: "False"
  type: ContainersReady
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "True"
  type: PodScheduled
containerStatuses:
{{{{ range .spec.containers }}}}
- image: {{{{ .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {exit_code}
      finishedAt: {{{{ $now | Quote }}}}
      reason: {container_reason}
      startedAt: {{{{ $now | Quote }}}}
{{{{ end }}}}
phase: {phase}
"""


def _terminated_next(exit_code: str, container_reason: str, reason: str, phase: str) -> dict:
    template = _TERMINATED.format(
        exit_code=exit_code, container_reason=container_reason, reason=reason, phase=phase
    )
    return {"patches": [{"subresource": "status", "root": "status", "type": "merge", "template": template}]}


def exit_fast_stage(
    name: str = "agnhost-exit-fast", key: str = ".spec.containers.[0].args.[0]", value: str = EXIT_FAST_ARG
) -> dict:
    """A Running, Ready pod of agnhost's `entrypoint-tester` (by default; else whose `key` is
    `value`) succeeds about a second later."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    *_RUNNING,
                    {
                        "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                        "operator": "In",
                        "values": ["True"],
                    },
                    {"key": key, "operator": "In", "values": [value]},
                ]
            },
            "delay": {"durationMilliseconds": 1000},
            "next": _terminated_next("0", "Completed", "PodCompleted", "Succeeded"),
        },
    }


def ray_submitter_stage() -> dict:
    """KubeRay's submitter pod (its first container, with RAY_JOB_SUBMISSION_ID, runs `ray job submit`, which
    the Ray dashboard stand-in, localfleet/raydashboard.py, takes as done) succeeds about a second
    after it is Ready, as it would once the Ray job it follows ended."""
    key = f'.spec.containers.[0].env.[] | select( .name == "{RAY_SUBMISSION_ID_ENV}" ) | .name'
    return exit_fast_stage("ray-submitter-exit", key, RAY_SUBMISSION_ID_ENV)


def exit_on_request_stage() -> dict:
    """A Running pod annotated EXIT_CODE_ANNOTATION ends with that exit code."""
    code = f'(index $.metadata.annotations "{EXIT_CODE_ANNOTATION}")'
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "agnhost-exit-on-request"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    *_RUNNING,
                    {"key": f'.metadata.annotations["{EXIT_CODE_ANNOTATION}"]', "operator": "Exists"},
                ]
            },
            "next": _terminated_next(
                "{{ " + code + " }}",
                "{{ if eq " + code + ' "0" }}Completed{{ else }}Error{{ end }}',
                "{{ if eq " + code + ' "0" }}PodCompleted{{ else }}PodFailed{{ end }}',
                "{{ if eq " + code + ' "0" }}Succeeded{{ else }}Failed{{ end }}',
            ),
        },
    }


def ready_stages(stock_pod_ready: dict) -> list[dict]:
    """kwok's pod-ready stage split in two: the stock one for every pod but stand-ins, and one for a
    stand-in that carries PROCESSES_READY_ANNOTATION."""
    plain = copy.deepcopy(stock_pod_ready)
    plain["spec"]["selector"]["matchExpressions"].append(
        {"key": f'.metadata.annotations["{STANDS_FOR_ANNOTATION}"]', "operator": "DoesNotExist"}
    )
    stand_in = copy.deepcopy(stock_pod_ready)
    stand_in["metadata"]["name"] = "stand-in-ready"
    stand_in["spec"]["selector"]["matchExpressions"] += [
        {"key": f'.metadata.annotations["{STANDS_FOR_ANNOTATION}"]', "operator": "Exists"},
        {"key": f'.metadata.annotations["{PROCESSES_READY_ANNOTATION}"]', "operator": "Exists"},
    ]
    return [plain, stand_in]


def cluster_exec(shim_dir: Path, kubeconfig: Path, kubectl: Path) -> dict:
    """kwok answers every pod's exec by running the command on this machine, with the curl stand-in
    first on PATH and the cluster's admin kubeconfig to find and annotate the pod."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterExec",
        "metadata": {"name": "agnhost-curl"},
        "spec": {
            "execs": [
                {
                    "local": {
                        "workDir": str(shim_dir),
                        "envs": [
                            {"name": "PATH", "value": f"{shim_dir}:/usr/local/bin:/usr/bin:/bin"},
                            {"name": "KUBECONFIG", "value": str(kubeconfig)},
                            {"name": "AGNHOST_KUBECTL", "value": str(kubectl)},
                        ],
                    }
                }
            ]
        },
    }


CURL_STAND_IN = '''\
"""curl as a conformance fleet's pod answers it (localfleet/agnhost.py): agnhost netexec's /readyz,
/healthz and /exit?code=N, the last by annotating the pod whose IP the URL names."""

import json
import os
import subprocess
import sys
import urllib.parse

ANNOTATION = "{annotation}"


def kubectl(*args):
    return subprocess.run([os.environ["AGNHOST_KUBECTL"], *args], capture_output=True, text=True)


def main(argv):
    urls = [a for a in argv if a.startswith(("http://", "https://"))]
    if not urls:
        print("curl (conformance fleet): no URL in " + " ".join(argv), file=sys.stderr)
        return 2
    url = urllib.parse.urlsplit(urls[0])
    if url.path in ("/readyz", "/healthz", "/"):
        print("ok")
        return 0
    if url.path != "/exit":
        print("curl (conformance fleet): no handler for " + url.path, file=sys.stderr)
        return 22
    code = (urllib.parse.parse_qs(url.query).get("code") or ["0"])[0]
    found = kubectl("get", "pods", "-A", "-o", "json", "--field-selector", "status.podIP=" + url.hostname)
    pods = json.loads(found.stdout or "{{}}").get("items") or []
    if found.returncode != 0 or not pods:
        print("curl (conformance fleet): no pod has IP " + str(url.hostname) + found.stderr, file=sys.stderr)
        return 7
    for pod in pods:
        meta = pod["metadata"]
        done = kubectl("annotate", "pod", "-n", meta["namespace"], meta["name"], ANNOTATION + "=" + code,
                       "--overwrite")
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
    return 0


sys.exit(main(sys.argv[1:]))
'''


def write_pod_behaviour(
    cluster_dir: Path, kubeconfig: Path, kubectl: Path, stock_pod_ready: Path
) -> list[Path]:
    """The stage and ClusterExec files for kwok's --config (in place of the stock pod-ready and
    pod-complete stages), and the curl stand-in they use."""
    shim_dir = cluster_dir / "agnhost-bin"
    shim_dir.mkdir(parents=True, exist_ok=True)
    curl = shim_dir / "curl"
    curl.write_text(f"#!{sys.executable}\n" + CURL_STAND_IN.format(annotation=EXIT_CODE_ANNOTATION))
    curl.chmod(0o755)
    files = []
    plain_ready, stand_in_ready = ready_stages(yaml.safe_load(stock_pod_ready.read_text()))
    for name, doc in (
        ("pod-ready", plain_ready),
        ("stand-in-ready", stand_in_ready),
        ("exit-fast", exit_fast_stage()),
        ("ray-submitter-exit", ray_submitter_stage()),
        ("exit-on-request", exit_on_request_stage()),
        ("exec", cluster_exec(shim_dir, kubeconfig, kubectl)),
    ):
        path = cluster_dir / f"kwok-agnhost-{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        files.append(path)
    return files
