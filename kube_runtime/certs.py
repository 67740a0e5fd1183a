"""X.509 helpers both processes use (cryptography): a CA, a serving certificate it signs, and the
self-signed pair a metrics server falls back to when no certificate directory is given, as
controller-runtime's metrics server does (client-go's `GenerateSelfSignedCertKeyWithFixtures("localhost",
[127.0.0.1])`: a throw-away CA `localhost-ca@<unix time>` signing `localhost@<unix time>`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = dt.timedelta(days=3650)
SERVING_VALIDITY = dt.timedelta(days=365)
BACKDATE = dt.timedelta(minutes=5)  # tolerate clock skew between replicas and the apiserver
CA_COMMON_NAME = "kueue-webhook-ca"
SELF_SIGNED_HOST = "localhost"
SELF_SIGNED_IPS = ("127.0.0.1",)


def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def key_usage(ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        key_encipherment=not ca,
        key_cert_sign=ca,
        crl_sign=ca,
        content_commitment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def generate_ca(
    now: dt.datetime, validity: dt.timedelta = CA_VALIDITY, common_name: str = CA_COMMON_NAME
) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key(key)


def issue_serving_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    now: dt.datetime,
    validity: dt.timedelta = SERVING_VALIDITY,
    common_name: str | None = None,
) -> tuple[bytes, bytes]:
    if common_name is None:
        common_name = dns_names[0] if dns_names else (ip_addresses[0] if ip_addresses else "kueue-webhook")
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    return _issue(ca_cert_pem, ca_key_pem, subject, ExtendedKeyUsageOID.SERVER_AUTH, now, validity, sans=sans)


def issue_client_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    common_name: str,
    organizations: Sequence[str],
    now: dt.datetime,
    validity: dt.timedelta = SERVING_VALIDITY,
) -> tuple[bytes, bytes]:
    """A client certificate: the apiserver's x509 authenticator takes the common name as the user
    and each organization as a group."""
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return _issue(ca_cert_pem, ca_key_pem, subject, ExtendedKeyUsageOID.CLIENT_AUTH, now, validity)


def _issue(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    subject: list[x509.NameAttribute],
    usage: x509.ObjectIdentifier,
    now: dt.datetime,
    validity: dt.timedelta,
    sans: list[x509.GeneralName] | None = None,
) -> tuple[bytes, bytes]:
    ca_cert = load_certs(ca_cert_pem)[0]
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    not_after = min(now + validity, ca_cert.not_valid_after_utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans is not None:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
        critical=False,
    ).sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    return cert.public_bytes(serialization.Encoding.PEM), pem_key(key)


def load_certs(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem)


def self_signed_serving_cert(
    now: dt.datetime | None = None,
    host: str = SELF_SIGNED_HOST,
    ip_addresses: Sequence[str] = SELF_SIGNED_IPS,
    validity: dt.timedelta = SERVING_VALIDITY,
) -> tuple[bytes, bytes]:
    """(certificate chain PEM, key PEM) for `host` and `ip_addresses`, signed by a CA made for it and
    then forgotten: encryption without a trust anchor (clients skip verification, as Prometheus'
    `insecureSkipVerify` does for controller-runtime's self-signed metrics certificates)."""
    now = now or dt.datetime.now(dt.UTC)
    stamp = int(now.timestamp())
    ca_cert, ca_key = generate_ca(now, validity, common_name=f"{host}-ca@{stamp}")
    cert, key = issue_serving_cert(
        ca_cert, ca_key, [host], list(ip_addresses), now, validity, common_name=f"{host}@{stamp}"
    )
    return cert + ca_cert, key
