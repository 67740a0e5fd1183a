"""Logging setup: key=value locally, JSON in deployment, and secrets never reach the output."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from kube_runtime.logging import REDACTED, bind_object, setup_logging

TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6InNlY3JldC10b2tlbiJ9.payload.signature"
KUBECONFIG = "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: " + TOKEN
KEY_DATA = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JR0hBZ0VBTUJNR0J5cUdTTTQ5"


@pytest.fixture
def output():
    stream = io.StringIO()
    yield stream
    logging.getLogger().handlers = []
    structlog.reset_defaults()


def test_sensitive_keys_are_redacted_in_key_value_output(output):
    setup_logging("info", json=False, stream=output)
    log = structlog.get_logger("test")
    log.info(
        "connecting",
        token=TOKEN,
        kubeconfig=KUBECONFIG,
        password="hunter2-password",
        client_key_data=KEY_DATA,
        user={"client-key-data": KEY_DATA, "client-certificate-data": KEY_DATA, "name": "u"},
        secret_name="worker1-kubeconfig",
    )
    text = output.getvalue()
    for secret in (TOKEN, "hunter2-password", KEY_DATA, "kind: Config"):
        assert secret not in text
    assert REDACTED in text
    assert "event='connecting'" in text and "level='info'" in text
    assert "worker1-kubeconfig" in text  # a Secret's name is not secret
    assert "'name': 'u'" in text


def test_json_output_redacts_nested_and_embedded_secrets(output):
    setup_logging("debug", json=True, stream=output)
    log = structlog.get_logger("test")
    log.warning("request failed", headers={"Authorization": f"Bearer {TOKEN}"}, detail=f"sent Bearer {TOKEN}")
    record = json.loads(output.getvalue().strip().splitlines()[-1])
    assert TOKEN not in output.getvalue()
    assert record["headers"]["Authorization"] == REDACTED
    assert record["detail"] == f"sent Bearer {REDACTED}"
    assert record["level"] == "warning" and record["event"] == "request failed"
    assert record["timestamp"].endswith("Z")


def test_stdlib_logging_is_routed_and_redacted(output):
    setup_logging("info", json=True, stream=output)
    logging.getLogger("some.library").warning("auth header Bearer %s", TOKEN)
    text = output.getvalue()
    assert TOKEN not in text
    record = json.loads(text.strip().splitlines()[-1])
    assert record["logger"] == "some.library" and record["level"] == "warning"


def test_exceptions_do_not_leak_tokens(output):
    setup_logging("info", json=True, stream=output)
    try:
        raise RuntimeError(f"login failed with token={TOKEN}")
    except RuntimeError:
        structlog.get_logger("test").exception("boom")
    assert TOKEN not in output.getvalue()
    assert "RuntimeError" in output.getvalue()


def test_level_filters(output):
    setup_logging("warning", json=True, stream=output)
    structlog.get_logger("test").info("hidden")
    structlog.get_logger("test").error("shown")
    assert "hidden" not in output.getvalue() and "shown" in output.getvalue()


def test_bind_object_binds_cluster_kind_namespace_name(output):
    setup_logging("info", json=True, stream=output)
    obj = {"kind": "Workload", "metadata": {"name": "job-a-1", "namespace": "team-a"}}
    bind_object(structlog.get_logger("test"), obj, cluster="worker1").info("admitted")
    record = json.loads(output.getvalue().strip().splitlines()[-1])
    assert (record["cluster"], record["kind"], record["namespace"], record["name"]) == (
        "worker1",
        "Workload",
        "team-a",
        "job-a-1",
    )
