"""MultiKueueCluster credentials (multikueue-spec §1.7, §3.1.3): a worker's kubeconfig from a Secret,
a file under the allowed prefix, or a ClusterProfile plus an access provider, and whether it is safe.
No network I/O; the two file helpers are synchronous, for `asyncio.to_thread`. Every failure is a
`CredentialError`: the MultiKueueCluster `Active` reason and the Go error text of its message."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import os
import posixpath
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import yaml

from kueue_domain import api, fields

# The env var through which an exec plugin receives the ClusterProfile's exec extension data.
CLUSTER_EXEC_CONFIG_ENV = "KUEUE_CLUSTER_EXEC_CONFIG"

_B64 = "base64"  # a string field holding base64 data
# Type of each kubeconfig field read here, in clientcmd's v1 schema (names do not collide across kinds).
_FIELD_TYPES: dict[str, Any] = {
    **dict.fromkeys("server certificate-authority proxy-url cluster user".split(), str),
    **dict.fromkeys("token tokenFile username password".split(), str),
    **dict.fromkeys("certificate-authority-data client-certificate-data client-key-data".split(), _B64),
    **dict.fromkeys(("exec", "auth-provider"), dict),
    "insecure-skip-tls-verify": bool,
}
_INNER_KEYS = {"clusters": "cluster", "users": "user", "contexts": "context"}
# ExecConfig fields a ClusterProfile kubeconfig takes from the access provider (upstream copies these).
_EXEC_FIELDS = ("apiVersion", "command", "args", "env", "provideClusterInfo")
_PROVIDER_LISTS = ("accessProviders", "credentialsProviders")


class CredentialError(Exception):
    """Credentials could not be loaded or are unsafe; `str(exc)` is the Go error text."""

    def __init__(self, reason: str, error: str, not_found: bool = False) -> None:
        super().__init__(error)
        self.reason = reason
        self.error = error
        # A missing Secret/ClusterProfile: its watch triggers the next attempt, so do not retry.
        self.not_found = not_found

    @property
    def message(self) -> str:
        return api.load_client_config_failed_message(self.error)


def _bad_kubeconfig(error: str, not_found: bool = False) -> CredentialError:
    return CredentialError(api.MKC_REASON_BAD_KUBECONFIG, error, not_found)


def _insecure(error: str) -> CredentialError:
    return CredentialError(api.MKC_REASON_INSECURE_KUBECONFIG, error)


def _unparsable(detail: str) -> CredentialError:
    return _insecure(api.err_kubeconfig_parse(detail))


def _bad_profile(error: str, not_found: bool = False) -> CredentialError:
    return CredentialError(api.MKC_REASON_BAD_CLUSTER_PROFILE, error, not_found)


def _go_os_error(op: str, error: OSError, path: str) -> str:
    """Go's *PathError text: `open /x: no such file or directory`."""
    text = error.strerror or str(error)
    return f"{op} {error.filename or path}: {text[:1].lower()}{text[1:]}"


# ------------------------------------------------------------------------------------------------
# Kubeconfig bytes: Secret or file


def kubeconfig_from_secret(secret: dict | None, name: str) -> bytes:
    """`data["kubeconfig"]` of the Secret `name` (None when the Secret does not exist)."""
    if secret is None:
        raise _bad_kubeconfig(api.err_secret_not_found(name), not_found=True)
    encoded = (secret.get("data") or {}).get(api.KUBECONFIG_SECRET_KEY)
    if encoded is None:
        raise _bad_kubeconfig(api.err_secret_key_not_found(name))
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError, TypeError) as e:
        raise _bad_kubeconfig(f"illegal base64 data in secret {api.go_quote(name)}: {e}") from None


def resolve_kubeconfig_path(
    path: str, prefix: str = api.KUBECONFIG_PATH_PREFIX, validate: bool = True
) -> str:
    """The real path of a `locationType: Path` kubeconfig, which must lie strictly under `prefix`."""
    if not validate:
        return path
    if not path:
        raise _bad_kubeconfig(api.ERR_KUBECONFIG_PATH_EMPTY)
    cleaned = posixpath.normpath(path)
    cleaned = cleaned[1:] if cleaned.startswith("//") else cleaned  # as Go's filepath.Clean
    if ".." in cleaned.split("/"):
        raise _bad_kubeconfig(api.ERR_KUBECONFIG_PATH_DOTDOT)
    if not cleaned.startswith("/"):
        raise _bad_kubeconfig(api.ERR_KUBECONFIG_PATH_NOT_ABSOLUTE)
    try:
        real_prefix = os.path.realpath(prefix, strict=True)
    except OSError:
        # A missing prefix directory allows no path at all.
        raise _bad_kubeconfig(api.err_kubeconfig_path_outside_prefix(cleaned, prefix)) from None
    try:
        real_path = os.path.realpath(cleaned, strict=True)
    except OSError as e:
        raise _bad_kubeconfig(api.err_kubeconfig_symlinks(_go_os_error("lstat", e, cleaned))) from None
    # Component-wise, so `<prefix>-other/x` is not under `<prefix>`.
    if real_path == real_prefix or not PurePosixPath(real_path).is_relative_to(real_prefix):
        raise _bad_kubeconfig(api.err_kubeconfig_path_outside_prefix(real_path, real_prefix))
    return real_path


def read_kubeconfig_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except IsADirectoryError as e:
        raise _bad_kubeconfig(_go_os_error("read", e, path)) from None
    except OSError as e:
        raise _bad_kubeconfig(_go_os_error("open", e, path)) from None


# ------------------------------------------------------------------------------------------------
# Kubeconfig validation


def validate_kubeconfig(raw: bytes | str, allow_exec: bool = False) -> dict:
    """The parsed kubeconfig, if it passes every rule of §3.1.3 (checked in upstream's order)."""
    config = _parse(raw)
    named = {key: _named_entries(config, key) for key in _INNER_KEYS}
    clusters, users = named["clusters"], named["users"]
    if any(user.get("tokenFile") for user in users.values()):
        raise _insecure(api.ERR_TOKEN_FILE_NOT_ALLOWED)
    for name, cluster in clusters.items():
        if cluster.get("insecure-skip-tls-verify"):
            raise _insecure(api.err_insecure_tls(name))
        if cluster.get("certificate-authority"):
            raise _insecure(api.err_ca_file_not_allowed(name))
        if not cluster.get("server"):
            raise _insecure(api.err_server_url_required(name))
    cluster, user = _current_context(config, named)
    _check_rest_config(cluster["server"], user, allow_exec)
    return config


def _parse(raw: bytes | str) -> dict:
    try:
        config = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise _unparsable(_yaml_error_text(e)) from None
    if not isinstance(config or {}, dict):
        raise _unparsable("a kubeconfig must be a YAML or JSON object")
    return config or {}


def _yaml_error_text(error: yaml.YAMLError) -> str:
    """Go's `yaml: line N: <problem>`, without PyYAML's excerpt of the offending line: that line
    may hold a token or a key, and this text ends in a condition message and in the logs."""
    problem = getattr(error, "problem", None) or getattr(error, "reason", None) or "invalid YAML"
    mark = getattr(error, "problem_mark", None)
    if mark is not None:
        return f"yaml: line {mark.line + 1}: {' '.join(str(problem).split())}"
    position = getattr(error, "position", None)
    where = f" at byte {position}" if isinstance(position, int) else ""
    return f"yaml: {' '.join(str(problem).split())}{where}"


def _named_entries(config: dict, list_key: str) -> dict[str, dict]:
    """`clusters`/`users`/`contexts` as name -> inner object, with the field types checked."""
    inner_key = _INNER_KEYS[list_key]
    entries = config.get(list_key) or []
    if not isinstance(entries, list):
        raise _unparsable(f"{list_key} must be a list")
    named: dict[str, dict] = {}
    for index, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise _unparsable(f"{list_key}[{index}] must be an object with a name")
        if name in named:
            raise _unparsable(f"duplicate name {api.go_quote(name)} in {list_key}")
        inner = entry.get(inner_key) or {}
        if not isinstance(inner, dict):
            raise _unparsable(f"{list_key}[{index}].{inner_key} must be an object")
        for key, kind in _FIELD_TYPES.items():
            _check_type(inner.get(key), kind, f"{list_key}[{index}].{inner_key}.{key}")
        named[name] = inner
    return named


def _check_type(value: Any, kind: Any, where: str) -> None:
    if value is None:
        return
    if kind == _B64:
        try:
            base64.b64decode(value, validate=True)
            return
        except (binascii.Error, ValueError, TypeError):
            raise _unparsable(f"{where} must be base64-encoded data") from None
    if not isinstance(value, kind):
        raise _unparsable(f"{where} must be a {kind.__name__}")


def _current_context(config: dict, named: dict[str, dict[str, dict]]) -> tuple[dict, dict]:
    """The cluster and user the client would use, as clientcmd resolves `current-context`."""
    context_name = config.get("current-context")
    if not isinstance(context_name, str) or not context_name:
        raise _unparsable("current-context is not set")
    context, quoted = named["contexts"].get(context_name), api.go_quote(context_name)
    if context is None:
        raise _unparsable(f"context {quoted} not found")
    cluster_name, user_name = context.get("cluster") or "", context.get("user") or ""
    if cluster_name not in named["clusters"]:
        raise _unparsable(f"cluster {api.go_quote(cluster_name)} not found for context {quoted}")
    if user_name and user_name not in named["users"]:
        raise _unparsable(f"user {api.go_quote(user_name)} not found for context {quoted}")
    return named["clusters"][cluster_name], named["users"].get(user_name, {})


def _check_rest_config(server: str, user: dict, allow_exec: bool) -> None:
    if user.get("tokenFile"):  # rest.Config.BearerTokenFile; the users loop rejects it first
        raise _insecure(api.ERR_BEARER_TOKEN_FILE_NOT_ALLOWED)
    if not _trusted_endpoint(server):
        raise _insecure(api.ERR_UNTRUSTED_SERVER_ENDPOINT)
    if user.get("username") or user.get("password"):
        raise _insecure(api.ERR_BASIC_AUTH_NOT_ALLOWED)
    if user.get("exec") is not None and not allow_exec:
        raise _insecure(api.ERR_EXEC_PLUGINS_NOT_ALLOWED)
    if user.get("auth-provider") is not None:
        raise _insecure(api.ERR_AUTH_PROVIDERS_NOT_ALLOWED)


def _trusted_endpoint(server: str) -> bool:
    """The server's host (lower-cased, port stripped) is an IP address or a DNS-1123 subdomain."""
    try:
        parts = urlsplit(server.lower())
        parts.port  # noqa: B018 -- raises ValueError on a malformed port, as Go's url.Parse does
    except ValueError:
        return False
    host = parts.hostname or ""
    try:
        ipaddress.ip_address(host)
        return "%" not in host  # Go's net.ParseIP rejects zoned IPv6 addresses
    except ValueError:
        return bool(host) and not fields.dns1123_subdomain_errors(host)


def credentials_hint(kubeconfig: dict, now: Any) -> str:
    """What to renew when a worker answers 401, from the current user of a validated kubeconfig
    (never its secret material): an expired or not yet valid client certificate, else the token."""
    contexts = {c.get("name"): c.get("context") or {} for c in kubeconfig.get("contexts") or ()}
    users = {u.get("name"): u.get("user") or {} for u in kubeconfig.get("users") or ()}
    user = users.get(contexts.get(kubeconfig.get("current-context"), {}).get("user"), {})
    if user.get("client-certificate-data"):
        from cryptography import x509

        try:
            cert = x509.load_pem_x509_certificate(base64.b64decode(user["client-certificate-data"]))
        except ValueError:
            return "the client certificate is not a PEM certificate"
        stamp = "%Y-%m-%dT%H:%M:%SZ"
        if cert.not_valid_after_utc < now:
            return f"the client certificate expired at {cert.not_valid_after_utc.strftime(stamp)}"
        if cert.not_valid_before_utc > now:
            return f"the client certificate is not valid before {cert.not_valid_before_utc.strftime(stamp)}"
        return "the worker does not trust the client certificate"
    if user.get("token"):
        return "the worker does not accept the token (expired or revoked?)"
    if user.get("exec"):
        return "the worker does not accept the exec plugin's credentials"
    return "the kubeconfig has no credentials for the current user"


# ------------------------------------------------------------------------------------------------
# ClusterProfile


@dataclass(frozen=True)
class AccessProvider:
    """One `multiKueue.clusterProfile.accessProviders[]` entry of the Configuration."""

    name: str
    exec_config: dict


def parse_access_providers(cluster_profile_cfg: dict | None) -> list[AccessProvider]:
    """The configured providers (accessProviders, else the deprecated credentialsProviders);
    ValueError with Kubernetes-style field errors when invalid."""
    cfg = cluster_profile_cfg or {}
    access, legacy = (cfg.get(key) or [] for key in _PROVIDER_LISTS)
    access_path, legacy_path = (fields.Path("multiKueue", "clusterProfile", key) for key in _PROVIDER_LISTS)
    errors: list[fields.FieldError] = []
    if access and legacy:
        errors.append(fields.forbidden(legacy_path, api.MSG_CREDENTIALS_PROVIDERS_EXCLUSIVE))
    entries, path = (access, access_path) if access else (legacy, legacy_path)
    for index, entry in enumerate(entries):
        errors.extend(_provider_errors(entry, path.index(index)))
    if errors:
        raise ValueError(fields.aggregate(errors))
    return [AccessProvider(entry["name"], dict(entry["execConfig"])) for entry in entries]


def _provider_errors(entry: Any, path: fields.Path) -> list[fields.FieldError]:
    entry = entry if isinstance(entry, dict) else {}
    exec_config = entry.get("execConfig") if isinstance(entry.get("execConfig"), dict) else {}
    exec_path = path.child("execConfig")
    missing = [path.child("name")] if not entry.get("name") else []
    missing += [exec_path.child(key) for key in ("command", "apiVersion") if not exec_config.get(key)]
    for index, env in enumerate(exec_config.get("env") or []):
        if not (env if isinstance(env, dict) else {}).get("name"):
            missing.append(exec_path.child("env").index(index).child("name"))
    mode = exec_config.get("interactiveMode")
    if not mode:
        missing.append(exec_path.child("interactiveMode"))
    errors = [fields.required(p, api.MSG_MUST_BE_SPECIFIED) for p in missing]
    if mode and mode not in api.EXEC_INTERACTIVE_MODES:
        supported = ", ".join(api.go_quote(m) for m in api.EXEC_INTERACTIVE_MODES)
        detail = f"{fields.render_value(mode)}: supported values: {supported}"
        errors.append(fields.FieldError(str(exec_path.child("interactiveMode")), "Unsupported value", detail))
    return errors


def kubeconfig_from_cluster_profile(
    profile: dict | None, name: str, providers: list[AccessProvider], feature_enabled: bool
) -> dict:
    """A kubeconfig (exec user) for the ClusterProfile `name` (None when it does not exist)."""
    if not feature_enabled:
        disabled = api.MKC_REASON_CLUSTER_PROFILE_FEATURE_DISABLED
        raise CredentialError(disabled, api.ERR_CLUSTER_PROFILE_FEATURE_DISABLED)
    if profile is None:
        raise _bad_profile(api.err_cluster_profile_not_found(name), not_found=True)
    if not providers:
        raise _bad_profile(api.ERR_NO_ACCESS_PROVIDER)
    accessor, provider = _pick_accessor(profile, name, providers)
    if not provider.exec_config:
        raise _bad_profile(api.err_no_exec_config(provider.name))
    cluster = accessor.get("cluster") if isinstance(accessor.get("cluster"), dict) else {}
    kubeconfig = _exec_kubeconfig(name, cluster, provider)
    try:
        validate_kubeconfig(json.dumps(kubeconfig), allow_exec=True)
    except CredentialError as e:
        raise CredentialError(api.MKC_REASON_BAD_REST_CONFIG, e.error) from None
    return kubeconfig


def _pick_accessor(profile: dict, name: str, providers: list[AccessProvider]) -> tuple[dict, AccessProvider]:
    """The first configured provider (config order) that the profile offers."""
    status = profile.get("status") or {}
    offered: dict[str, dict] = {}
    # Read accessProviders last so that it wins over the deprecated credentialProviders.
    for key in ("credentialProviders", "accessProviders"):
        for entry in status.get(key) or []:
            if isinstance(entry, dict) and entry.get("name"):
                offered[entry["name"]] = entry
    for provider in providers:
        if provider.name in offered:
            return offered[provider.name], provider
    raise _bad_profile(api.err_no_matching_cluster_accessor(name))


def _exec_kubeconfig(name: str, cluster: dict, provider: AccessProvider) -> dict:
    exec_block = {key: provider.exec_config[key] for key in _EXEC_FIELDS if key in provider.exec_config}
    exec_block["interactiveMode"] = api.EXEC_INTERACTIVE_MODE_NEVER  # a controller has no terminal
    extension = _exec_extension(cluster)
    cluster_block = {
        key: cluster[key] for key in ("server", "certificate-authority-data", "proxy-url") if cluster.get(key)
    }
    if extension is not None:
        # A plugin with provideClusterInfo gets it as KUBERNETES_EXEC_INFO's spec.cluster.config, as
        # from client-go; every plugin also finds it in an env var.
        cluster_block["extensions"] = [{"name": api.CLUSTER_PROFILE_EXEC_EXTENSION, "extension": extension}]
        extra = {"name": CLUSTER_EXEC_CONFIG_ENV, "value": json.dumps(extension)}
        exec_block["env"] = [*(exec_block.get("env") or []), extra]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster_block}],
        "users": [{"name": name, "user": {"exec": exec_block}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def _exec_extension(cluster: dict) -> Any:
    for extension in cluster.get("extensions") or []:
        if isinstance(extension, dict) and extension.get("name") == api.CLUSTER_PROFILE_EXEC_EXTENSION:
            return extension.get("extension")
    return None
