"""The Ray dashboard stand-in (localfleet.raydashboard): the job API the ray-operator calls, by head
Service, in proxy form, over a real socket."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer

import pytest

from localfleet.raydashboard import Dashboards, make_handler, split_target

HEAD = "rj-head-svc.ns.svc.cluster.local:8265"


def test_split_target_reads_proxy_and_origin_form():
    assert split_target(f"http://{HEAD}/api/jobs/x", "ignored") == (HEAD, "/api/jobs/x")
    assert split_target("/api/jobs/?a=b", "h:1") == ("h:1", "/api/jobs/")


def test_a_job_first_asked_about_runs_then_succeeds():
    d = Dashboards(job_seconds=0.2)
    status, info = d.handle("GET", HEAD, "/api/jobs/rj-abc", b"")
    assert status == 200 and info["status"] == "RUNNING" and info["job_id"] == "rj-abc"
    assert "end_time" not in info
    time.sleep(0.25)
    status, info = d.handle("GET", HEAD, "/api/jobs/rj-abc", b"")
    assert info["status"] == "SUCCEEDED" and info["end_time"] >= info["start_time"]
    # Another head Service is another Ray cluster: it has no such job listed.
    assert d.handle("GET", "other:8265", "/api/jobs/", b"") == (200, [])


def test_submit_stop_delete_and_a_taken_submission_id():
    d = Dashboards(job_seconds=60)
    body = json.dumps({"entrypoint": "python x.py", "submission_id": "s1"}).encode()
    assert d.handle("POST", HEAD, "/api/jobs/", body) == (200, {"job_id": "s1", "submission_id": "s1"})
    status, text = d.handle("POST", HEAD, "/api/jobs/", body)
    assert status == 500 and "Please use a different submission_id" in text
    assert d.handle("POST", HEAD, "/api/jobs/s1/stop", b"") == (200, {"stopped": True})
    assert d.handle("GET", HEAD, "/api/jobs/s1", b"")[1]["status"] == "STOPPED"
    assert d.handle("POST", HEAD, "/api/jobs/s1/stop", b"") == (200, {"stopped": False})
    assert d.handle("DELETE", HEAD, "/api/jobs/s1", b"") == (200, {"deleted": True})
    assert d.handle("POST", HEAD, "/api/jobs/s1/stop", b"")[0] == 404


def test_a_job_marked_to_fail_fails():
    d = Dashboards(job_seconds=0)
    body = json.dumps({"entrypoint": "exit 1 # fleet.ray.io/fail", "submission_id": "f"}).encode()
    d.handle("POST", HEAD, "/api/jobs/", body)
    info = d.handle("GET", HEAD, "/api/jobs/f", b"")[1]
    assert info["status"] == "FAILED" and info["error_type"]


def test_serve_applications_run_once_deployed():
    d = Dashboards(job_seconds=1)
    config = {"applications": [{"name": "app", "route_prefix": "/", "deployments": [{"name": "d1"}]}]}
    assert d.handle("PUT", HEAD, "/api/serve/applications/", json.dumps(config).encode())[0] == 200
    details = d.handle("GET", HEAD, "/api/serve/applications/", b"")[1]
    assert details["applications"]["app"]["status"] == "RUNNING"
    assert details["applications"]["app"]["deployments"]["d1"]["status"] == "HEALTHY"
    assert d.handle("GET", "10.244.0.5:8000", "/-/healthz", b"") == (200, "success")


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(Dashboards(job_seconds=0)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


def test_requests_through_it_as_an_http_proxy(server):
    proxy = urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{server.server_address[1]}"})
    opener = urllib.request.build_opener(proxy)
    with opener.open(f"http://{HEAD}/api/jobs/j1", timeout=5) as resp:
        assert json.loads(resp.read())["status"] == "SUCCEEDED"
    with pytest.raises(urllib.error.HTTPError) as err:
        opener.open(f"http://{HEAD}/api/version", timeout=5)
    assert err.value.code == 404
