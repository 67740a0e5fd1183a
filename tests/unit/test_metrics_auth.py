"""Secure metrics serving (kube_runtime/httpserver.py, kube_runtime/delegated_auth.py): the bounded
review caches, TokenReview answers, and the HTTP layer on real aiohttp servers in this process (over
TLS, with review functions standing in for the cluster): 401 without or with a bad token, 403 when
the SubjectAccessReview denies, 500 when a review cannot be made, 200 otherwise; probes stay plain
HTTP; the certificate comes from a directory (re-read when it changes) or is self-signed;
`--metrics-insecure` serves plain HTTP. The same against a real kube-apiserver, for both processes:
tests/integration/test_secure_metrics.py."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import ipaddress
import socket
import ssl
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry, Counter

from kube_runtime import certs
from kube_runtime.client import KubeClientError
from kube_runtime.delegated_auth import (
    TOKEN_REVIEW_PATH,
    AuthenticationError,
    AuthorizationError,
    Decision,
    ExpiringCache,
    NonResourceAttributes,
    SubjectAccessReviewer,
    TokenReviewer,
    UserInfo,
    bearer_token,
)
from kube_runtime.httpserver import (
    MetricsAuth,
    MetricsServing,
    ServingCertificate,
    add_metrics_arguments,
    start_servers,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------------------------------------
# Caches and reviews


def test_the_cache_forgets_after_its_ttl_and_stays_bounded():
    clock = Clock()
    cache: ExpiringCache[str, int] = ExpiringCache(10.0, max_entries=3, monotonic=clock)
    cache.put("a", 1)
    assert cache.get("a") == (True, 1)
    clock.now += 10.0
    assert cache.get("a") == (False, None)
    for i, key in enumerate("bcd"):
        cache.put(key, i)
        clock.now += 1
    cache.put("e", 9)  # full: the oldest goes
    assert len(cache) == 3 and cache.get("b") == (False, None) and cache.get("e") == (True, 9)
    clock.now += 8.5  # c (put at +0 of this round +1) has expired, d and e have not
    cache.put("f", 5)
    assert cache.get("c") == (False, None)
    assert cache.get("d") == (True, 2) and cache.get("e") == (True, 9) and cache.get("f") == (True, 5)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("  Bearer abc  ", "abc"),
        ("Bearer abc extra", "abc"),
        ("Bearer ", None),
        ("Bearer", None),
        ("Basic dXNlcjpwYXNz", None),
        ("", None),
    ],
)
def test_bearer_token(header, token):
    assert bearer_token({"Authorization": header} if header else {}) == token


class FakeReviews:
    """What the kube-apiserver answers to TokenReviews and SubjectAccessReviews, counted."""

    def __init__(self) -> None:
        self.users = {"good": "system:serviceaccount:mon:reader", "denied": "system:serviceaccount:mon:other"}
        self.allowed = {"system:serviceaccount:mon:reader"}
        self.calls: list[tuple[str, dict]] = []
        self.fail = False

    async def request(self, method: str, path: str, body: dict) -> dict:
        self.calls.append((path, body))
        if self.fail:
            raise KubeClientError("connection refused")
        if path == TOKEN_REVIEW_PATH:
            name = self.users.get(body["spec"]["token"])
            if name is None:
                return {"status": {"authenticated": False, "error": "invalid bearer token"}}
            groups = ["system:serviceaccounts", "system:serviceaccounts:mon", "system:authenticated"]
            return {
                "status": {"authenticated": True, "user": {"username": name, "uid": "u1", "groups": groups}}
            }
        user = body["spec"]["user"]
        return {"status": {"allowed": user in self.allowed, "reason": "" if user in self.allowed else "no"}}

    def count(self, path_end: str) -> int:
        return sum(1 for path, _ in self.calls if path.endswith(path_end))


async def test_token_reviews_are_cached_briefly_and_failures_not_at_all():
    kube, clock = FakeReviews(), Clock()
    reviewer = TokenReviewer(kube, cache_seconds=10.0, monotonic=clock)  # type: ignore[arg-type]
    user = await reviewer.review("good")
    assert user is not None and user.name == "system:serviceaccount:mon:reader" and user.uid == "u1"
    assert "system:authenticated" in user.groups
    assert await reviewer.review("good") == user
    assert await reviewer.review("bad") is None
    assert await reviewer.review("bad") is None
    assert reviewer.reviews_total == 2
    assert kube.calls[0][1] == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "good"},
    }
    assert all("good" not in repr(key) for key in reviewer._cache._entries)  # hashed, not kept
    clock.now += 10.0
    kube.fail = True
    with pytest.raises(AuthenticationError):
        await reviewer.review("good")
    kube.fail = False
    assert (await reviewer.review("good")) == user
    assert reviewer.reviews_total == 4


async def test_access_reviews_share_the_bounded_cache():
    kube, clock = FakeReviews(), Clock()
    reviewer = SubjectAccessReviewer(kube, always_allow_groups=(), max_entries=2, monotonic=clock)  # type: ignore[arg-type]
    users = [UserInfo(f"u{i}") for i in range(3)]
    for user in users:
        assert (await reviewer.authorize(user, NonResourceAttributes("get", "/metrics"))).allowed is False
    assert len(reviewer._cache) == 2
    masters = UserInfo("admin", groups=("system:masters",))
    assert (await reviewer.authorize(masters, NonResourceAttributes("get", "/metrics"))).allowed is False
    with pytest.raises(AuthorizationError):
        kube.fail = True
        await reviewer.authorize(UserInfo("new"), NonResourceAttributes("get", "/metrics"))


# ------------------------------------------------------------------------------------------------
# The HTTP layer


def registry_with_a_sample() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("test_scrapes", "A sample.", registry=registry).inc(2)
    return registry


async def get(url: str, token: str | None = None) -> tuple[int, str, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as session:
        async with session.get(url, headers=headers, ssl=False) as resp:
            return resp.status, await resp.text(), dict(resp.headers)


@pytest.fixture
async def secure():
    """Metrics over TLS with review functions (and what they were asked), probes over HTTP."""
    asked: list[tuple[str, str, str]] = []
    broken = {"tokens": False, "access": False}

    async def review_token(token: str) -> UserInfo | None:
        if broken["tokens"]:
            raise AuthenticationError("tokenreviews: connection refused")
        return {"alice": UserInfo("alice"), "bob": UserInfo("bob")}.get(token)

    async def review_access(user: UserInfo, attributes: NonResourceAttributes) -> Decision:
        asked.append((user.name, attributes.verb, attributes.path))
        if broken["access"]:
            raise AuthorizationError("subjectaccessreviews: timeout")
        return Decision(user.name == "alice", "" if user.name == "alice" else "no RBAC rule")

    servers = await start_servers(
        "127.0.0.1:0",
        "127.0.0.1:0",
        registry_with_a_sample(),
        lambda: True,
        auth=MetricsAuth(review_token, review_access),
    )
    metrics, health = servers
    try:
        yield f"https://127.0.0.1:{metrics.port}", f"http://127.0.0.1:{health.port}", asked, broken
    finally:
        for server in servers:
            await server.stop()


async def test_only_an_authorized_token_reads_the_metrics(secure):
    metrics, _, asked, _ = secure
    status, body, headers = await get(metrics + "/metrics", "alice")
    assert status == 200 and "test_scrapes_total 2.0" in body
    assert asked == [("alice", "get", "/metrics")]

    for token in (None, "mallory"):
        status, body, headers = await get(metrics + "/metrics", token)
        assert (status, body) == (401, "Unauthorized\n")
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert headers["X-Content-Type-Options"] == "nosniff"

    assert (await get(metrics + "/metrics", "bob"))[:2] == (403, "Authorization denied for user bob\n")


async def test_a_review_that_cannot_be_made_is_a_500(secure):
    metrics, _, _, broken = secure
    broken["tokens"] = True
    assert (await get(metrics + "/metrics", "alice"))[:2] == (500, "Authentication failed\n")
    broken["tokens"], broken["access"] = False, True
    assert (await get(metrics + "/metrics", "alice"))[:2] == (500, "Authorization for user alice failed\n")


async def test_probes_stay_plain_http_and_apart_from_the_metrics(secure):
    metrics, health, _, _ = secure
    assert (await get(health + "/healthz"))[:2] == (200, "ok")
    assert (await get(health + "/readyz"))[:2] == (200, "ok")
    assert (await get(health + "/metrics"))[0] == 404
    assert (await get(metrics + "/healthz", "alice"))[0] == 404
    with pytest.raises(aiohttp.ClientError):  # the metrics port speaks TLS only
        await get(metrics.replace("https://", "http://") + "/metrics", "alice")


async def test_scrapes_reuse_the_cached_reviews():
    kube = FakeReviews()
    (server,) = await start_servers("127.0.0.1:0", "0", registry_with_a_sample(), lambda: True, kube=kube)
    try:
        url = f"https://127.0.0.1:{server.port}/metrics"
        for _ in range(3):
            assert (await get(url, "good"))[0] == 200
            assert (await get(url, "denied"))[0] == 403
            assert (await get(url, "nobody"))[0] == 401
        assert kube.count("tokenreviews") == 3 and kube.count("subjectaccessreviews") == 2
        sar = next(body for path, body in kube.calls if path.endswith("subjectaccessreviews"))
        assert sar["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
    finally:
        await server.stop()


async def test_insecure_metrics_are_plain_http_for_anyone():
    (server,) = await start_servers(
        "127.0.0.1:0", "0", registry_with_a_sample(), lambda: True, serving=MetricsServing(insecure=True)
    )
    try:
        status, body, _ = await get(f"http://127.0.0.1:{server.port}/metrics")
        assert status == 200 and "test_scrapes_total 2.0" in body
    finally:
        await server.stop()


async def test_one_address_for_both_only_when_insecure():
    with pytest.raises(ValueError, match="need different ports"):
        await start_servers(
            "127.0.0.1:18443", "127.0.0.1:18443", CollectorRegistry(), lambda: True, kube=object()
        )
    with pytest.raises(ValueError, match="cluster client"):
        await start_servers("127.0.0.1:0", "0", CollectorRegistry(), lambda: True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"127.0.0.1:{port}"
    (server,) = await start_servers(
        address, address, registry_with_a_sample(), lambda: True, serving=MetricsServing(insecure=True)
    )
    try:
        assert (await get(f"http://{address}/metrics"))[0] == 200
        assert (await get(f"http://{address}/readyz"))[:2] == (200, "ok")
    finally:
        await server.stop()


def test_the_flags():
    parser = argparse.ArgumentParser()
    add_metrics_arguments(parser)
    assert MetricsServing.from_args(parser.parse_args([])) == MetricsServing(False, None)
    args = parser.parse_args(["--metrics-insecure", "--metrics-cert-dir", "/d"])
    assert MetricsServing.from_args(args) == MetricsServing(True, "/d")


# ------------------------------------------------------------------------------------------------
# Certificates


async def served_certificate(port: int) -> x509.Certificate:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    return x509.load_der_x509_certificate(der)


def write_pair(directory: Path, name: str) -> None:
    now = dt.datetime.now(dt.UTC)
    ca, ca_key = certs.generate_ca(now)
    cert, key = certs.issue_serving_cert(ca, ca_key, [name], [], now)
    (directory / "tls.crt").write_bytes(cert)
    (directory / "tls.key").write_bytes(key)


async def test_the_self_signed_certificate_names_localhost():
    (server,) = await start_servers(
        "127.0.0.1:0",
        "0",
        CollectorRegistry(),
        lambda: True,
        auth=MetricsAuth(None, None),  # type: ignore[arg-type]
    )
    try:
        cert = await served_certificate(server.port)
    finally:
        await server.stop()
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert cert.subject.rfc4514_string().startswith("CN=localhost@")


async def test_a_certificate_directory_is_served_and_reloaded(tmp_path: Path):
    assert "no tls.crt or tls.key" in (MetricsServing(cert_dir=str(tmp_path)).problem() or "")
    write_pair(tmp_path, "metrics-one.example")
    assert MetricsServing(cert_dir=str(tmp_path)).problem() is None
    (server,) = await start_servers(
        "127.0.0.1:0",
        "0",
        CollectorRegistry(),
        lambda: True,
        serving=MetricsServing(cert_dir=str(tmp_path)),
        auth=MetricsAuth(None, None),  # type: ignore[arg-type]
    )
    try:
        first = await served_certificate(server.port)
        assert "metrics-one.example" in first.subject.rfc4514_string()
        certificate = server.certificate
        assert certificate is not None and certificate.reload_if_changed() is False
        write_pair(tmp_path, "metrics-two.example")
        assert certificate.reload_if_changed() is True
        second = await served_certificate(server.port)
        assert "metrics-two.example" in second.subject.rfc4514_string()
        (tmp_path / "tls.key").write_text("not a key")  # half-written: the last good pair stays
        assert certificate.reload_if_changed() is False
        assert "metrics-two.example" in (await served_certificate(server.port)).subject.rfc4514_string()
    finally:
        await server.stop()
    assert isinstance(ServingCertificate().context, ssl.SSLContext)
