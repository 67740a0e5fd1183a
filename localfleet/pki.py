"""PKI: one CA per run, serving certificates for every TLS listener, client certificates per user,
and the self-contained kubeconfigs built from them. The X.509 work is kube_runtime.certs'."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from kube_runtime import certs
from localfleet.common import b64, write_file

FRONT_PROXY_CLIENT = "front-proxy-client"  # the apiservers' proxy client certificate's common name
VALIDITY = dt.timedelta(days=365)


class CertificateAuthority:
    def __init__(self, name: str) -> None:
        self.cert_pem, self.key_pem = certs.generate_ca(dt.datetime.now(dt.UTC), VALIDITY, common_name=name)
        self.cert = certs.load_certs(self.cert_pem)[0]

    def issue(
        self, common_name: str, organizations: Iterable[str] = (), server: bool = False
    ) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM): a serving certificate for localhost and 127.0.0.1, or a client
        certificate for user `common_name` in the groups `organizations`."""
        now = dt.datetime.now(dt.UTC)
        if server:
            return certs.issue_serving_cert(
                self.cert_pem, self.key_pem, ["localhost"], ["127.0.0.1"], now, VALIDITY, common_name
            )
        return certs.issue_client_cert(
            self.cert_pem, self.key_pem, common_name, list(organizations), now, VALIDITY
        )


def service_account_key_pair() -> tuple[bytes, bytes]:
    """(private key PEM, public key PEM): the apiserver signs ServiceAccount tokens with the private
    half and verifies them with the public one."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return certs.pem_key(key), public


def write_pair(directory: Path, name: str, pair: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    """<name>.crt (readable by all) and <name>.key (by the owner only) in `directory`; returns `pair`."""
    crt, key = pair
    write_file(directory / f"{name}.crt", crt, 0o644)
    write_file(directory / f"{name}.key", key)
    return pair


def kubeconfig(cluster: str, server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> dict:
    """A self-contained kubeconfig (inline CA and credentials), as MultiKueue requires."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": cluster, "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
            }
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
    }
