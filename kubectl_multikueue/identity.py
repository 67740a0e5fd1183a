"""`kubectl multikueue kubeconfig`: on a worker cluster, the identity the MultiKueue manager uses
there (a ServiceAccount bound to the worker ClusterRole of deploy/rbac/) and a self-contained
kubeconfig for it: inline CA data and a token, what the manager's kubeconfig validation accepts.
Idempotent: run it again for a fresh token."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import yaml

from kube_runtime import credentials
from kube_runtime.client import AlreadyExists, ApiError, KubeClient, KubeClientError, NotFound
from kubectl_multikueue.fleet import (
    CLIENT_OPTIONS,
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    SERVICE_ACCOUNT,
    default_kubeconfig,
)
from kueue_domain import api

# The same file as deploy/rbac/multikueue-worker-clusterrole.yaml (a symbolic link in the source
# tree, a copy in an installed package).
ROLE_FILE = Path(__file__).with_name("worker-clusterrole.yaml")
FIELD_MANAGER = "kubectl-multikueue"
DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


class IdentityError(Exception):
    pass


def parse_duration(text: str) -> int:
    """Seconds of a Go-style duration made of hours, minutes and seconds (`8760h`, `1h30m`)."""
    match = DURATION.match(text.strip())
    if not text.strip() or not match or not any(match.groups()):
        raise IdentityError(f"--duration {text!r}: give hours, minutes or seconds, such as 8760h or 90m")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total < 600:
        raise IdentityError(f"--duration {text!r}: a token lives at least 10m")
    return total


def token_expiry(token: str) -> str:
    """The token's `exp` claim as an RFC 3339 time ("" when it cannot be read)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return dt.datetime.fromtimestamp(int(claims["exp"]), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (IndexError, KeyError, ValueError, binascii.Error, TypeError):
        return ""


def worker_kubeconfig(cluster_name: str, server: str, ca_data: bytes, user: str, token: str) -> str:
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster_name,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_data).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": cluster_name,
    }
    return yaml.safe_dump(config, sort_keys=False)


def _worker_endpoint(path: str, context: str | None) -> tuple[str, str, bytes, Any]:
    """(cluster name, server, CA bytes, parsed kubeconfig) of the worker's context."""
    try:
        config = yaml.safe_load(Path(path).read_text())
        creds = credentials.from_kubeconfig_dict(config, context, base_dir=str(Path(path).parent))
    except OSError as e:
        raise IdentityError(f"cannot read the worker kubeconfig {path}: {e.strerror}") from None
    except (yaml.YAMLError, credentials.CredentialsError) as e:
        raise IdentityError(f"the worker kubeconfig {path}: {e}") from None
    name = context or config.get("current-context")
    ctx = next(c["context"] for c in config["contexts"] if c.get("name") == name)
    if not creds.verify:
        raise IdentityError(
            f"context {name} skips TLS verification (insecure-skip-tls-verify): the manager refuses such "
            "kubeconfigs; give the worker's CA instead"
        )
    ca = creds.ca_data
    if ca is None and creds.ca_file:
        try:
            ca = Path(creds.ca_file).read_bytes()
        except OSError as e:
            raise IdentityError(
                f"context {name}: cannot read its certificate-authority file {creds.ca_file}: {e.strerror}"
            ) from None
    if not ca:
        raise IdentityError(
            f"context {name}: its cluster has no certificate-authority-data or certificate-authority"
        )
    return str(ctx.get("cluster") or "worker"), creds.host, ca, config


async def create_identity(
    kubeconfig: str | None, context: str | None, namespace: str, service_account: str, duration: str
) -> tuple[str, list[str]]:
    """(the kubeconfig text, what was done, line by line)."""
    seconds = parse_duration(duration)
    path = kubeconfig or default_kubeconfig()
    cluster_name, server, ca, config = _worker_endpoint(path, context)
    role = yaml.safe_load(ROLE_FILE.read_text())
    notes = []
    client = await KubeClient.from_kubeconfig_dict(config, context, **CLIENT_OPTIONS)
    try:
        try:
            await client.request("GET", "/version")
        except KubeClientError as e:
            raise IdentityError(f"cannot reach the worker cluster at {server}: {e}") from None
        notes.append(f"worker: {cluster_name} at {server}")
        try:
            await client.create(api.NAMESPACE, {"metadata": {"name": namespace}})
            notes.append(f"namespace {namespace}: created")
        except AlreadyExists:
            notes.append(f"namespace {namespace}: exists")
        try:
            await client.create(SERVICE_ACCOUNT, {"metadata": {"name": service_account}}, namespace)
            notes.append(f"serviceaccount {namespace}/{service_account}: created")
        except AlreadyExists:
            notes.append(f"serviceaccount {namespace}/{service_account}: exists")
        role_name = role["metadata"]["name"]
        await client.apply(CLUSTER_ROLE, role, FIELD_MANAGER, force=True)
        notes.append(f"clusterrole {role_name}: applied")
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{role_name}:{namespace}:{service_account}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
        }
        await client.apply(CLUSTER_ROLE_BINDING, binding, FIELD_MANAGER, force=True)
        notes.append(f"clusterrolebinding {binding['metadata']['name']}: applied")
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        path_ = SERVICE_ACCOUNT.api_path(namespace, service_account, "token")
        token = ((await client.request("POST", path_, body=request)).get("status") or {}).get("token")
        if not token:
            raise IdentityError(f"TokenRequest for {namespace}/{service_account} returned no token")
        expiry = token_expiry(token)
        notes.append(f"token: for {namespace}/{service_account}" + (f", expires {expiry}" if expiry else ""))
    except NotFound as e:
        raise IdentityError(f"the worker refused: {e}") from None
    except ApiError as e:
        raise IdentityError(f"the worker refused: {e.status.get('message') or e}") from None
    finally:
        await client.close()
    return worker_kubeconfig(cluster_name, server, ca, f"{namespace}/{service_account}", token), notes
