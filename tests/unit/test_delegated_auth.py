"""kube_runtime.delegated_auth without a cluster: which client certificates make the X-Remote-*
headers count (signed by the request-header CA, allowed name, client usage, valid now), what a
client-CA certificate authenticates, the ConfigMap's parsing, and the apiserver's Status bodies."""

from __future__ import annotations

import datetime as dt
import json

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from multidict import CIMultiDict

from kube_runtime import delegated_auth as auth

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


class CA:
    def __init__(self, name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - dt.timedelta(days=1))
            .not_valid_after(NOW + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def issue(
        self,
        cn: str,
        orgs: tuple[str, ...] = (),
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        not_after: dt.datetime | None = None,
    ) -> bytes:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - dt.timedelta(hours=1))
            .not_valid_after(not_after or NOW + dt.timedelta(days=30))
        )
        if usage is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        return builder.sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


FRONT_PROXY = CA("front-proxy-ca")
CLIENTS = CA("client-ca")
STRANGER = CA("someone-else")

CONFIG_MAP = {
    "data": {
        "client-ca-file": CLIENTS.pem,
        "requestheader-client-ca-file": FRONT_PROXY.pem,
        "requestheader-allowed-names": json.dumps(["front-proxy-client"]),
        "requestheader-username-headers": json.dumps(["X-Remote-User"]),
        "requestheader-group-headers": json.dumps(["X-Remote-Group"]),
        "requestheader-extra-headers-prefix": json.dumps(["X-Remote-Extra-"]),
    }
}
SETTINGS = auth.RequestHeaderSettings.from_config_map(CONFIG_MAP)
PROXY_CERT = FRONT_PROXY.issue("front-proxy-client")


def headers(**extra: str) -> CIMultiDict[str]:
    h: CIMultiDict[str] = CIMultiDict()
    h.add("X-Remote-User", "alice")
    h.add("X-Remote-Group", "team-a")
    h.add("x-remote-group", "team-b")
    for k, v in extra.items():
        h.add(k, v)
    return h


def test_the_config_map_is_parsed():
    assert SETTINGS.allowed_names == ("front-proxy-client",)
    assert SETTINGS.username_headers == ("X-Remote-User",)
    assert SETTINGS.group_headers == ("X-Remote-Group",)
    assert SETTINGS.extra_prefixes == ("X-Remote-Extra-",)
    assert [c.subject for c in SETTINGS.requestheader_cas] == [FRONT_PROXY.cert.subject]
    assert [c.subject for c in SETTINGS.client_cas] == [CLIENTS.cert.subject]
    assert FRONT_PROXY.pem in SETTINGS.trust_pem() and CLIENTS.pem in SETTINGS.trust_pem()
    assert auth.RequestHeaderSettings.from_config_map(None) == auth.RequestHeaderSettings()


def test_the_front_proxy_certificate_makes_the_headers_count():
    h = headers(**{"X-Remote-Extra-Scopes": "a", "X-Remote-Extra-Acme.com%2Fproject": "p1"})
    user = auth.authenticate(PROXY_CERT, h, SETTINGS, NOW)
    assert user == auth.UserInfo(
        name="alice",
        groups=("team-a", "team-b", "system:authenticated"),
        extra={"scopes": ("a",), "acme.com/project": ("p1",)},
    )


def test_headers_without_a_trusted_front_proxy_certificate_are_ignored():
    # No certificate, one of another CA, another name, a server-only usage, an expired one.
    assert auth.authenticate(None, headers(), SETTINGS, NOW) is None
    assert auth.authenticate(STRANGER.issue("front-proxy-client"), headers(), SETTINGS, NOW) is None
    assert auth.authenticate(FRONT_PROXY.issue("someone"), headers(), SETTINGS, NOW) is None
    server_only = FRONT_PROXY.issue("front-proxy-client", usage=ExtendedKeyUsageOID.SERVER_AUTH)
    assert auth.authenticate(server_only, headers(), SETTINGS, NOW) is None
    expired = FRONT_PROXY.issue("front-proxy-client", not_after=NOW - dt.timedelta(minutes=1))
    assert auth.authenticate(expired, headers(), SETTINGS, NOW) is None
    # A certificate without extended key usage may authenticate clients.
    assert auth.authenticate(FRONT_PROXY.issue("front-proxy-client", usage=None), headers(), SETTINGS, NOW)


def test_a_front_proxy_request_must_name_a_user():
    empty: CIMultiDict[str] = CIMultiDict({"X-Remote-User": " ", "X-Remote-Group": "g"})
    assert auth.authenticate(PROXY_CERT, empty, SETTINGS, NOW) is None


def test_an_empty_allowed_names_list_accepts_any_name_of_the_ca():
    anyone = auth.RequestHeaderSettings.from_config_map(
        {"data": {**CONFIG_MAP["data"], "requestheader-allowed-names": "[]"}}
    )
    user = auth.authenticate(FRONT_PROXY.issue("aggregator"), headers(), anyone, NOW)
    assert user is not None and user.name == "alice"


def test_a_client_ca_certificate_is_its_own_user_and_its_headers_do_not_count():
    admin = CLIENTS.issue("admin", orgs=("system:masters",))
    user = auth.authenticate(admin, headers(), SETTINGS, NOW)
    assert user == auth.UserInfo(name="admin", groups=("system:masters", "system:authenticated"))


def test_settings_without_cas_trust_nobody():
    assert auth.authenticate(PROXY_CERT, headers(), auth.RequestHeaderSettings(), NOW) is None


async def test_system_masters_are_allowed_without_a_review():
    reviewer = auth.SubjectAccessReviewer(kube=None)  # type: ignore[arg-type]  # never called
    attrs = auth.ResourceAttributes("get", "visibility.kueue.x-k8s.io", "v1beta1", "clusterqueues")
    admin = auth.UserInfo("admin", groups=("system:masters", "system:authenticated"))
    assert (await reviewer.authorize(admin, attrs)).allowed
    assert reviewer.reviews_total == 0


def test_review_attributes():
    attrs = auth.ResourceAttributes(
        "get", "visibility.kueue.x-k8s.io", "v1beta1", "localqueues", "pendingworkloads", "lq", "ns"
    )
    assert attrs.review() == {
        "resourceAttributes": {
            "namespace": "ns",
            "verb": "get",
            "group": "visibility.kueue.x-k8s.io",
            "version": "v1beta1",
            "resource": "localqueues",
            "subresource": "pendingworkloads",
            "name": "lq",
        }
    }
    assert auth.NonResourceAttributes("get", "/apis").review() == {
        "nonResourceAttributes": {"path": "/apis", "verb": "get"}
    }


def test_status_bodies_are_the_apiservers():
    someone = auth.UserInfo("someone", groups=("system:authenticated",))
    cq = auth.ResourceAttributes(
        "get", "visibility.kueue.x-k8s.io", "v1beta1", "clusterqueues", "pendingworkloads", "cq"
    )
    assert auth.forbidden_status(someone, cq) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'clusterqueues.visibility.kueue.x-k8s.io "cq" is forbidden: User "someone" cannot '
        'get resource "clusterqueues/pendingworkloads" in API group "visibility.kueue.x-k8s.io" '
        "at the cluster scope",
        "reason": "Forbidden",
        "details": {"name": "cq", "group": "visibility.kueue.x-k8s.io", "kind": "clusterqueues"},
        "code": 403,
    }
    lq = auth.ResourceAttributes(
        "get", "visibility.kueue.x-k8s.io", "v1beta1", "localqueues", "pendingworkloads", "lq", "ns"
    )
    assert auth.forbidden_status(someone, lq, "RBAC: nope")["message"].endswith(
        'cannot get resource "localqueues/pendingworkloads" in API group "visibility.kueue.x-k8s.io" '
        'in the namespace "ns": RBAC: nope'
    )
    path = auth.forbidden_status(someone, auth.NonResourceAttributes("get", "/apis/x"))
    assert path["message"] == 'forbidden: User "someone" cannot get path "/apis/x"'
    assert auth.unauthorized_status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }
