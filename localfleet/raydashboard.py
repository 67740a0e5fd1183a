"""The Ray dashboard stand-in: a fleet component that answers the HTTP endpoints of the Ray
dashboard that KubeRay's ray-operator calls, so that RayJobs run to an end on kwok, where no Ray
runtime runs.

The ray-operator talks to `http://<head service>.<namespace>.svc.cluster.local:8265` (the head
Service's dashboard port). On the fleet it reaches this process instead: its environment has
HTTP_PROXY pointed here (localfleet.operators.RayOperator), so every such request arrives in
proxy form, the absolute URL naming the head Service. Each head Service (the URL's host) is one
Ray cluster with its own jobs.

Ray's job API (`/api/jobs/`, what ray-operator's dashboard client calls):
  POST   /api/jobs/                  submit {entrypoint, submission_id, ...} -> {job_id, submission_id}
  GET    /api/jobs/                  every job of the cluster
  GET    /api/jobs/<id>              one job: {job_id, submission_id, status, message, start_time, ...}
  GET    /api/jobs/<id>/logs         {logs}
  POST   /api/jobs/<id>/stop         {stopped}
  DELETE /api/jobs/<id>              {deleted}
A job is RUNNING from its submission and SUCCEEDED `--job-seconds` later (STOPPED when stopped
first). In the ray-operator's default submission mode a submitter pod runs `ray job submit`; on
kwok that pod runs nothing, so a job this stand-in is first asked about is taken as submitted
then (the moment the submitter would have submitted it). A job whose entrypoint or metadata holds
`fleet.ray.io/fail` ends FAILED instead.

Ray Serve's API (RayServices): PUT /api/serve/applications/ stores the applications of a Serve
config, GET /api/serve/applications/ reports each RUNNING with its deployments HEALTHY; a proxy
actor's health check (`/-/healthz` on any pod address) answers `success`.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

JOBS_PATH = "/api/jobs/"
SERVE_PATH = "/api/serve/applications/"
HEALTH_PATH = "/-/healthz"
FAIL_MARK = "fleet.ray.io/fail"
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Job:
    submission_id: str
    entrypoint: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    runtime_env: dict[str, Any] | None = None
    start_time: int = field(default_factory=now_ms)
    end_time: int = 0
    stopped: bool = False

    def fails(self) -> bool:
        return FAIL_MARK in self.entrypoint or FAIL_MARK in json.dumps(self.metadata)

    def status(self, job_ms: int, at: int) -> str:
        if self.stopped:
            return "STOPPED"
        if at - self.start_time >= job_ms:
            if not self.end_time:
                self.end_time = self.start_time + job_ms
            return "FAILED" if self.fails() else "SUCCEEDED"
        return "RUNNING"

    def info(self, job_ms: int) -> dict[str, Any]:
        status = self.status(job_ms, now_ms())
        message = {
            "RUNNING": "Job is currently running.",
            "SUCCEEDED": "Job finished successfully.",
            "FAILED": "Job entrypoint command failed with exit code 1",
            "STOPPED": "Job was intentionally stopped.",
        }[status]
        out: dict[str, Any] = {
            "type": "SUBMISSION",
            "job_id": self.submission_id,
            "submission_id": self.submission_id,
            "status": status,
            "message": message,
            "entrypoint": self.entrypoint,
            "metadata": self.metadata,
            "start_time": self.start_time,
        }
        if self.runtime_env:
            out["runtime_env"] = self.runtime_env
        if status in TERMINAL:
            out["end_time"] = self.end_time or now_ms()
        if status == "FAILED":
            out["error_type"] = "JOB_ENTRYPOINT_COMMAND_ERROR"
        return out


class Dashboards:
    """Every Ray cluster's jobs and Serve applications, by the head Service's host:port."""

    def __init__(self, job_seconds: float) -> None:
        self.job_ms = int(job_seconds * 1000)
        self.lock = threading.Lock()
        self.jobs: dict[str, dict[str, Job]] = {}
        self.serve: dict[str, dict[str, Any]] = {}

    def handle(self, method: str, host: str, path: str, body: bytes) -> tuple[int, Any]:
        with self.lock:
            if path.startswith(JOBS_PATH) or path == JOBS_PATH.rstrip("/"):
                return self._jobs(method, host, path[len(JOBS_PATH) :].strip("/"), body)
            if path.startswith(SERVE_PATH.rstrip("/")):
                return self._serve(method, host, body)
            if path.rstrip("/").endswith(HEALTH_PATH):
                return 200, "success"
        return 404, {"error": f"the Ray dashboard stand-in does not serve {method} {path}"}

    def _jobs(self, method: str, host: str, rest: str, body: bytes) -> tuple[int, Any]:
        jobs = self.jobs.setdefault(host, {})
        job_id, _, action = rest.partition("/")
        if not job_id:
            if method == "GET":
                return 200, [j.info(self.job_ms) for j in jobs.values()]
            if method == "POST":
                return self._submit(jobs, body)
            return 405, {"error": f"{method} {JOBS_PATH} is not allowed"}
        job = jobs.get(job_id)
        if job is None and method == "GET" and not action:
            # The submitter pod's `ray job submit`, which runs nothing on kwok.
            job = jobs[job_id] = Job(job_id)
        if job is None:
            return 404, {"error": f"Job {job_id} does not exist"}
        if method == "GET" and action == "logs":
            return 200, {"logs": ""}
        if method == "GET" and not action:
            return 200, job.info(self.job_ms)
        if method == "POST" and action == "stop":
            running = job.status(self.job_ms, now_ms()) not in TERMINAL
            if running:
                job.stopped, job.end_time = True, now_ms()
            return 200, {"stopped": running}
        if method == "DELETE" and not action:
            del jobs[job_id]
            return 200, {"deleted": True}
        return 405, {"error": f"{method} {JOBS_PATH}{rest} is not allowed"}

    def _submit(self, jobs: dict[str, Job], body: bytes) -> tuple[int, Any]:
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return 400, {"error": "the job submission is not JSON"}
        submission_id = request.get("submission_id") or f"raysubmit_{len(jobs) + 1:016d}"
        if submission_id in jobs:
            taken = f"Job with submission_id {submission_id} already exists."
            return 500, f"{taken} Please use a different submission_id."
        jobs[submission_id] = Job(
            submission_id,
            entrypoint=request.get("entrypoint") or "",
            metadata=request.get("metadata") or {},
            runtime_env=request.get("runtime_env"),
        )
        return 200, {"job_id": submission_id, "submission_id": submission_id}

    def _serve(self, method: str, host: str, body: bytes) -> tuple[int, Any]:
        if method == "PUT":
            try:
                config = json.loads(body or b"{}")
            except ValueError:
                return 400, {"error": "the Serve config is not JSON"}
            self.serve[host] = config
            return 200, {}
        if method != "GET":
            return 405, {"error": f"{method} {SERVE_PATH} is not allowed"}
        applications = {}
        for app in (self.serve.get(host) or {}).get("applications") or ():
            name = app.get("name", "default")
            deployments = {
                d.get("name", ""): {"name": d.get("name", ""), "status": "HEALTHY", "message": ""}
                for d in app.get("deployments") or ()
            }
            applications[name] = {
                "name": name,
                "status": "RUNNING",
                "message": "",
                "route_prefix": app.get("route_prefix", "/"),
                "deployments": deployments,
            }
        return 200, {"applications": applications, "deploy_mode": "MULTI_APP"}


def split_target(raw_path: str, host_header: str) -> tuple[str, str]:
    """(cluster host, path) of a request in proxy form (`http://host:port/path`) or origin form."""
    if raw_path.startswith(("http://", "https://")):
        url = urlsplit(raw_path)
        return url.netloc, url.path or "/"
    return host_header, urlsplit(raw_path).path or "/"


def make_handler(dashboards: Dashboards) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            host, path = split_target(self.path, self.headers.get("Host", ""))
            status, answer = dashboards.handle(method, host, path, body)
            data = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
            self.send_response(status)
            kind = "text/plain" if isinstance(answer, str) else "application/json"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def log_message(self, format: str, *args: Any) -> None:
            print(f"{self.command} {self.path} {args[1] if len(args) > 1 else ''}", flush=True)

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--job-seconds", type=float, default=2.0, help="how long a Ray job runs")
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(Dashboards(args.job_seconds)))
    server.daemon_threads = True
    print(f"Ray dashboard stand-in listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
