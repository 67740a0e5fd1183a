"""Self-managed webhook certificates: issuing, renewal, sharing through the Secret, CA injection,
and the configuration fields behind them."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import ssl
import stat

import pytest
from cryptography import x509

from kube_runtime.client import AlreadyExists, Conflict, Forbidden, NotFound
from kube_runtime.clock import FakeClock
from kueue_domain import api
from kueue_domain.config import ConfigError, parse_config
from worker_agent.webhooks import certs
from worker_agent.webhooks.review import apply_json_patch

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DNS = [
    "kueue-webhook-service.kueue-system.svc",
    "kueue-webhook-service.kueue-system.svc.cluster.local",
    "kueue-visibility-server.kueue-system.svc",
    "kueue-visibility-server.kueue-system.svc.cluster.local",
]
IPS = ["127.0.0.1"]


def serving(bundle: certs.CertBundle) -> x509.Certificate:
    return x509.load_pem_x509_certificate(bundle.tls_cert)


# ------------------------------------------------------------------------------------------------
# Configuration


def test_webhook_configuration_defaults_are_v1beta1s():
    config = parse_config({})
    assert config.webhook_port == 9443
    assert config.webhook_host == ""
    assert config.webhook_cert_dir == "/tmp/k8s-webhook-server/serving-certs"
    assert config.internal_cert_management is True
    assert config.webhook_service_name == "kueue-webhook-service"
    assert config.webhook_secret_name == "kueue-webhook-server-cert"


def test_webhook_configuration_fields_are_read_and_checked():
    config = parse_config(
        {
            "webhook": {"port": 10250, "host": "127.0.0.1", "certDir": "/certs"},
            "internalCertManagement": {
                "enable": False,
                "webhookServiceName": "svc",
                "webhookSecretName": "my.secret",
            },
        }
    )
    assert (config.webhook_port, config.webhook_host, config.webhook_cert_dir) == (
        10250,
        "127.0.0.1",
        "/certs",
    )
    assert (config.internal_cert_management, config.webhook_service_name, config.webhook_secret_name) == (
        False,
        "svc",
        "my.secret",
    )
    with pytest.raises(ConfigError) as err:
        parse_config(
            {"webhook": {"port": 70000}, "internalCertManagement": {"webhookServiceName": "Bad_Svc"}}
        )
    assert "webhook.port: must be between 0 and 65535, got 70000" in err.value.problems
    assert any("webhookServiceName" in p for p in err.value.problems)
    with pytest.raises(ConfigError, match="did you mean"):
        parse_config({"webhook": {"certdir": "/x"}})


def test_serving_names_cover_the_services_and_a_literal_host():
    assert certs.serving_names(parse_config({})) == (DNS, [])
    assert certs.serving_names(parse_config({"webhook": {"host": "127.0.0.1"}})) == (DNS, IPS)
    assert certs.serving_names(parse_config({"webhook": {"host": "0.0.0.0"}})) == (DNS, [])
    named = certs.serving_names(parse_config({"namespace": "q", "webhook": {"host": "hooks.example"}}))
    assert named == (
        [
            "kueue-webhook-service.q.svc",
            "kueue-webhook-service.q.svc.cluster.local",
            "kueue-visibility-server.q.svc",
            "kueue-visibility-server.q.svc.cluster.local",
            "hooks.example",
        ],
        [],
    )


# ------------------------------------------------------------------------------------------------
# Certificates


def test_a_new_bundle_chains_to_its_ca_and_covers_the_names(tmp_path):
    bundle = certs.renew(None, DNS, IPS, NOW)
    ca = x509.load_pem_x509_certificate(bundle.ca_cert)
    cert = serving(bundle)
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == DNS
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == IPS
    assert cert.not_valid_after_utc - NOW == certs.SERVING_VALIDITY
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert certs.rotation_reason(bundle, DNS, IPS, NOW) is None
    crt, key = certs.write_cert_files(tmp_path / "certs", bundle)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(crt, key)


def test_serving_certificate_is_renewed_by_the_same_ca_before_it_expires():
    bundle = certs.renew(None, DNS, IPS, NOW)
    later = NOW + certs.SERVING_VALIDITY - dt.timedelta(days=29)
    assert certs.rotation_reason(bundle, DNS, IPS, NOW + dt.timedelta(days=300)) is None
    assert certs.rotation_reason(bundle, DNS, IPS, later) == "the serving certificate expires soon"
    renewed = certs.renew(bundle, DNS, IPS, later)
    assert renewed.ca_cert == bundle.ca_cert and renewed.ca_key == bundle.ca_key
    assert renewed.tls_cert != bundle.tls_cert
    assert certs.rotation_reason(renewed, DNS, IPS, later) is None


def test_an_expiring_ca_is_replaced_and_the_old_one_stays_trusted():
    bundle = certs.renew(None, DNS, IPS, NOW)
    late = NOW + certs.CA_VALIDITY - dt.timedelta(days=10)
    assert certs.rotation_reason(bundle, DNS, IPS, late) == "the CA expires soon"
    renewed = certs.renew(bundle, DNS, IPS, late)
    cas = x509.load_pem_x509_certificates(renewed.ca_cert)
    assert len(cas) == 2
    assert cas[1] == x509.load_pem_x509_certificate(bundle.ca_cert)
    serving(renewed).verify_directly_issued_by(cas[0])
    assert certs.rotation_reason(renewed, DNS, IPS, late) is None


def test_a_certificate_missing_a_name_is_reissued():
    bundle = certs.renew(None, DNS, [], NOW)
    assert certs.rotation_reason(bundle, DNS, IPS, NOW) == "the serving certificate does not cover 127.0.0.1"
    broken = certs.CertBundle(b"junk", bundle.ca_key, bundle.tls_cert, bundle.tls_key)
    assert certs.rotation_reason(broken, DNS, IPS, NOW) == "unreadable certificate data"
    assert certs.rotation_reason(certs.renew(broken, DNS, IPS, NOW), DNS, IPS, NOW) is None


def test_a_certificate_of_another_ca_with_the_same_name_is_reissued():
    """Every CA we make has the same subject: a serving certificate of a former CA differs from the
    current one's only by its signature (cryptography's InvalidSignature), and is renewed."""
    old = certs.renew(None, DNS, IPS, NOW)
    current = certs.renew(None, DNS, IPS, NOW)
    mixed = certs.CertBundle(current.ca_cert, current.ca_key, old.tls_cert, old.tls_key)
    assert (
        certs.rotation_reason(mixed, DNS, IPS, NOW)
        == "the serving certificate is not signed by the current CA"
    )


def test_bundle_round_trips_through_secret_data():
    bundle = certs.renew(None, DNS, IPS, NOW)
    assert certs.CertBundle.from_secret({"data": bundle.to_secret_data()}) == bundle
    assert certs.CertBundle.from_secret({"data": {}}) is None
    assert certs.CertBundle.from_secret({}) is None


# ------------------------------------------------------------------------------------------------
# CertManager against an in-memory API


class FakeApi:
    """Secrets and webhook configurations with resourceVersions, enough for the cert manager."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict] = {}
        self.version = 0
        self.forbidden = False
        self.writes = 0

    def _key(self, resource, name):
        return (resource.plural, name)

    def _bump(self, obj):
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)

    async def get(self, resource, name, namespace=None):
        if self.forbidden:
            raise Forbidden({"code": 403, "message": "secrets is forbidden"})
        try:
            return copy.deepcopy(self.objects[self._key(resource, name)])
        except KeyError:
            raise NotFound({"code": 404}) from None

    async def create(self, resource, obj, namespace=None, field_manager=None):
        key = self._key(resource, obj["metadata"]["name"])
        if key in self.objects:
            raise AlreadyExists({"code": 409, "reason": "AlreadyExists"})
        obj = copy.deepcopy(obj)
        self._bump(obj)
        self.objects[key] = obj
        self.writes += 1
        return obj

    async def replace(self, resource, obj, namespace=None, field_manager=None):
        key = self._key(resource, obj["metadata"]["name"])
        if obj["metadata"].get("resourceVersion") != self.objects[key]["metadata"]["resourceVersion"]:
            raise Conflict({"code": 409})
        obj = copy.deepcopy(obj)
        self._bump(obj)
        self.objects[key] = obj
        self.writes += 1
        return obj

    async def patch_json(self, resource, name, ops, field_manager=None):
        key = self._key(resource, name)
        current = self.objects[key]
        if ops[0]["op"] == "test" and ops[0]["value"] != current["metadata"]["resourceVersion"]:
            raise Conflict({"code": 422})
        patched = apply_json_patch(current, [op for op in ops if op["op"] != "test"])
        self._bump(patched)
        self.objects[key] = patched
        return patched

    def secret(self) -> dict:
        return self.objects[("secrets", "kueue-webhook-server-cert")]


def manager(fake: FakeApi, tmp_path, clock: FakeClock | None = None, name: str = "a") -> certs.CertManager:
    config = parse_config({"webhook": {"host": "127.0.0.1", "certDir": str(tmp_path / name)}})
    return certs.CertManager(fake, config, clock or FakeClock(NOW))  # type: ignore[arg-type]


async def test_replicas_share_the_certificate_through_the_secret(tmp_path):
    fake = FakeApi()
    first, second = manager(fake, tmp_path, name="a"), manager(fake, tmp_path, name="b")
    assert await first.sync() is True
    assert await second.sync() is True
    assert fake.writes == 1
    assert first.bundle == second.bundle
    assert (tmp_path / "a" / "tls.crt").read_bytes() == (tmp_path / "b" / "tls.crt").read_bytes()
    assert await first.sync() is False  # nothing changed


async def test_renewal_is_written_once_and_picked_up_by_the_other_replica(tmp_path):
    fake = FakeApi()
    clock = FakeClock(NOW)
    first, second = manager(fake, tmp_path, clock, "a"), manager(fake, tmp_path, clock, "b")
    await first.sync()
    await second.sync()
    old = first.bundle
    await clock.advance((certs.SERVING_VALIDITY - dt.timedelta(days=20)).total_seconds())
    assert await first.sync() is True
    assert fake.writes == 2
    assert first.bundle.tls_cert != old.tls_cert and first.bundle.ca_cert == old.ca_cert
    assert await second.sync() is True
    assert second.bundle == first.bundle


async def test_a_racing_replica_adopts_the_winners_secret(tmp_path):
    fake = FakeApi()
    first = manager(fake, tmp_path, name="a")
    real_create = fake.create

    async def lose_the_race(resource, obj, namespace=None, field_manager=None):
        fake.create = real_create
        await manager(fake, tmp_path, name="b").sync()  # the other replica writes first
        return await real_create(resource, obj, namespace, field_manager)

    fake.create = lose_the_race
    await first.sync()
    assert certs.CertBundle.from_secret(fake.secret()) == first.bundle
    assert fake.writes == 1


async def test_without_access_to_the_secret_a_local_certificate_serves(tmp_path):
    fake = FakeApi()
    fake.forbidden = True
    mgr = manager(fake, tmp_path)
    assert await mgr.sync() is True
    assert mgr.stored is False
    assert certs.rotation_reason(mgr.bundle, DNS, IPS, NOW) is None
    assert await mgr.sync() is False  # keeps serving the same one
    fake.forbidden = False
    assert await mgr.sync() is True  # now stored in, and served from, the Secret
    assert mgr.stored is True
    assert certs.CertBundle.from_secret(fake.secret()) == mgr.bundle


async def test_ca_bundle_is_injected_into_every_webhook(tmp_path):
    fake = FakeApi()
    for resource, name in (
        (api.MUTATING_WEBHOOK_CONFIGURATION, api.MUTATING_WEBHOOK_CONFIGURATION_NAME),
        (api.VALIDATING_WEBHOOK_CONFIGURATION, api.VALIDATING_WEBHOOK_CONFIGURATION_NAME),
    ):
        await fake.create(
            resource,
            {
                "metadata": {"name": name},
                "webhooks": [
                    {"name": "a.kb.io", "clientConfig": {"url": "https://127.0.0.1:1/a"}},
                    {"name": "b.kb.io", "clientConfig": {"url": "https://127.0.0.1:1/b", "caBundle": "old"}},
                ],
            },
        )
    mgr = manager(fake, tmp_path)
    await mgr.sync()
    await mgr.inject_ca_bundle()
    wanted = base64.b64encode(mgr.bundle.ca_cert).decode()
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        hooks = next(obj for (p, _), obj in fake.objects.items() if p == plural)["webhooks"]
        assert [h["clientConfig"]["caBundle"] for h in hooks] == [wanted, wanted]
    version = fake.version
    await mgr.inject_ca_bundle()
    assert fake.version == version  # already in place: no writes


async def test_the_ca_goes_into_the_conversion_webhook_of_crds_that_reach_this_agent(tmp_path):
    fake = FakeApi()
    service = {"name": "kueue-webhook-service", "namespace": "kueue-system", "path": "/convert"}
    client_configs = {
        "workloads.kueue.x-k8s.io": {"service": service},
        "clusterqueues.kueue.x-k8s.io": {"url": "https://127.0.0.1:9443/convert"},
        "cohorts.kueue.x-k8s.io": {"service": {**service, "namespace": "other-kueue"}},
        "localqueues.kueue.x-k8s.io": {"url": "https://127.0.0.1:9999/convert"},
    }
    for name, client_config in client_configs.items():
        webhook = {"conversionReviewVersions": ["v1"], "clientConfig": client_config}
        conversion = {"strategy": "Webhook", "webhook": webhook}
        await fake.create(
            api.CUSTOM_RESOURCE_DEFINITION, {"metadata": {"name": name}, "spec": {"conversion": conversion}}
        )
    await fake.create(
        api.CUSTOM_RESOURCE_DEFINITION,
        {
            "metadata": {"name": "resourceflavors.kueue.x-k8s.io"},
            "spec": {"conversion": {"strategy": "None"}},
        },
    )
    config = parse_config({"webhook": {"host": "127.0.0.1", "port": 9443, "certDir": str(tmp_path / "a")}})
    mgr = certs.CertManager(fake, config, FakeClock(NOW), webhook_configurations=())  # type: ignore[arg-type]
    await mgr.sync()
    await mgr.inject_ca_bundle()
    wanted = base64.b64encode(mgr.bundle.ca_cert).decode()

    def bundle(name: str) -> str | None:
        crd = next(
            obj
            for (plural, n), obj in fake.objects.items()
            if plural == "customresourcedefinitions" and n == name
        )
        return ((crd["spec"]["conversion"].get("webhook") or {}).get("clientConfig") or {}).get("caBundle")

    assert bundle("workloads.kueue.x-k8s.io") == wanted  # our Service
    assert bundle("clusterqueues.kueue.x-k8s.io") == wanted  # a URL on our port
    assert bundle("cohorts.kueue.x-k8s.io") is None  # another install's Service
    assert bundle("localqueues.kueue.x-k8s.io") is None  # another agent's port
    assert bundle("resourceflavors.kueue.x-k8s.io") is None  # no conversion webhook
    version = fake.version
    await mgr.inject_ca_bundle()
    assert fake.version == version


async def test_file_certificates_are_watched_for_changes(tmp_path):
    config = parse_config(
        {"webhook": {"certDir": str(tmp_path)}, "internalCertManagement": {"enable": False}}
    )
    files = certs.FileCerts(config)
    with pytest.raises(FileNotFoundError):
        await files.sync()
    certs.write_cert_files(tmp_path, certs.renew(None, DNS, IPS, NOW))
    assert await files.sync() is True
    assert await files.sync() is False
