"""MultiKueueCluster credentials: Secret and Path sources, kubeconfig validation with the exact
upstream error texts, and kubeconfigs built from ClusterProfiles."""

from __future__ import annotations

import base64
import copy
import inspect
import json
import os

import pytest
import yaml

from kube_runtime import credentials
from kueue_domain import api
from manager import kubeconfig as kc
from manager.kubeconfig import AccessProvider, CredentialError

CA_DATA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
CERT_DATA = base64.b64encode(b"client certificate").decode()
KEY_DATA = base64.b64encode(b"client key").decode()


def kubeconfig(server: str = "https://worker1.example.com:6443", **user: object) -> dict:
    """A single-context kubeconfig for cluster/user/context "w1"; `user` defaults to a token."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "w1", "cluster": {"server": server, "certificate-authority-data": CA_DATA}}],
        "users": [{"name": "w1", "user": user or {"token": "sa-token"}}],
        "contexts": [{"name": "w1", "context": {"cluster": "w1", "user": "w1"}}],
        "current-context": "w1",
    }


def as_yaml(config: dict) -> bytes:
    return yaml.safe_dump(config).encode()


def reject(raw: bytes | str, allow_exec: bool = False) -> CredentialError:
    with pytest.raises(CredentialError) as info:
        kc.validate_kubeconfig(raw, allow_exec=allow_exec)
    return info.value


def insecure(raw: bytes | str, allow_exec: bool = False) -> str:
    """The error text of a kubeconfig that must be refused as InsecureKubeConfig."""
    error = reject(raw, allow_exec)
    assert error.reason == api.MKC_REASON_INSECURE_KUBECONFIG
    assert not error.not_found
    return error.error


def parse_error(detail: str) -> str:
    return f"failed to parse kubeconfig(apiconfig): {detail}"


EXEC = {"apiVersion": "client.authentication.k8s.io/v1", "command": "get-token", "args": ["--x"]}


# ------------------------------------------------------------------------------------------------
# CredentialError


def test_credential_error_carries_reason_error_text_and_condition_message():
    error = CredentialError(api.MKC_REASON_BAD_KUBECONFIG, 'Secret "w1" not found', not_found=True)
    assert str(error) == 'Secret "w1" not found'
    assert (error.reason, error.error, error.not_found) == ("BadKubeConfig", 'Secret "w1" not found', True)
    assert error.message == 'load client config failed: Secret "w1" not found'
    assert CredentialError("BadKubeConfig", "x").not_found is False


# ------------------------------------------------------------------------------------------------
# Secret source


def secret(data: dict[str, bytes]) -> dict:
    encoded = {key: base64.b64encode(value).decode() for key, value in data.items()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "w1"}, "data": encoded}


def test_secret_kubeconfig_is_decoded():
    raw = as_yaml(kubeconfig())
    assert kc.kubeconfig_from_secret(secret({"kubeconfig": raw, "other": b"x"}), "w1") == raw


def test_missing_secret_is_bad_kubeconfig_and_not_found():
    with pytest.raises(CredentialError) as info:
        kc.kubeconfig_from_secret(None, "w1")
    assert (info.value.reason, info.value.error) == ("BadKubeConfig", 'Secret "w1" not found')
    assert info.value.not_found
    assert info.value.message == 'load client config failed: Secret "w1" not found'


@pytest.mark.parametrize("data", [{"config": b"x"}, {}])
def test_secret_without_kubeconfig_key(data):
    with pytest.raises(CredentialError) as info:
        kc.kubeconfig_from_secret(secret(data), "w1")
    assert (info.value.reason, info.value.error) == (
        "BadKubeConfig",
        'key "kubeconfig" not found in secret "w1"',
    )
    assert not info.value.not_found


def test_secret_without_data_field():
    with pytest.raises(CredentialError) as info:
        kc.kubeconfig_from_secret({"metadata": {"name": "w1"}}, "w1")
    assert info.value.error == 'key "kubeconfig" not found in secret "w1"'


# ------------------------------------------------------------------------------------------------
# Path source


@pytest.fixture
def prefix(tmp_path):
    """An allowed-prefix directory holding one kubeconfig file, `w1.kubeconfig`."""
    directory = tmp_path / "etc" / "multikueue" / "kubeconfigs"
    directory.mkdir(parents=True)
    (directory / "w1.kubeconfig").write_bytes(as_yaml(kubeconfig()))
    return directory


def path_error(path: str, prefix: str) -> str:
    with pytest.raises(CredentialError) as info:
        kc.resolve_kubeconfig_path(path, prefix)
    assert info.value.reason == api.MKC_REASON_BAD_KUBECONFIG
    assert not info.value.not_found
    return info.value.error


def test_default_prefix_is_upstreams():
    default = inspect.signature(kc.resolve_kubeconfig_path).parameters["prefix"].default
    assert default == api.KUBECONFIG_PATH_PREFIX == "/etc/multikueue/kubeconfigs"


def test_path_under_prefix_resolves(prefix):
    assert kc.resolve_kubeconfig_path(str(prefix / "w1.kubeconfig"), str(prefix)) == str(
        prefix / "w1.kubeconfig"
    )
    nested = prefix / "team-a" / "w2.kubeconfig"
    nested.parent.mkdir()
    nested.write_text("x")
    assert kc.resolve_kubeconfig_path(str(nested), str(prefix)) == str(nested)


def test_path_is_cleaned_before_resolution(prefix):
    messy = f"/{prefix}/./team/../w1.kubeconfig"  # leading "//" and "." / ".." that stay inside
    assert kc.resolve_kubeconfig_path(messy, str(prefix)) == str(prefix / "w1.kubeconfig")


def test_validation_off_returns_any_path_unchanged():
    for path in ("/any/arbitrary/path", "relative/x", "../x", ""):
        assert kc.resolve_kubeconfig_path(path, "/nonexistent-prefix", validate=False) == path


def test_empty_path(prefix):
    assert path_error("", str(prefix)) == "kubeconfig path must not be empty"


@pytest.mark.parametrize("path", ["../w1.kubeconfig", "a/../../w1.kubeconfig", ".."])
def test_relative_path_with_dot_dot(prefix, path):
    assert (
        path_error(path, str(prefix)) == 'kubeconfig path is not under the allowed prefix: path contains ".."'
    )


@pytest.mark.parametrize("path", ["relative/path/file", "w1.kubeconfig", "./w1.kubeconfig"])
def test_relative_path(prefix, path):
    assert (
        path_error(path, str(prefix))
        == "kubeconfig path is not under the allowed prefix: path must be absolute"
    )


def test_absolute_dot_dot_escape_is_not_under_prefix(prefix, tmp_path):
    outside = tmp_path / "outside.kubeconfig"
    outside.write_text("x")
    escaping = f"{prefix}/../../../outside.kubeconfig"
    assert path_error(escaping, str(prefix)) == (
        f'kubeconfig path is not under the allowed prefix: "{outside}" is not under "{prefix}"'
    )


def test_sibling_directory_sharing_the_prefix_name_is_rejected(prefix):
    other = prefix.parent / "kubeconfigs-other"
    other.mkdir()
    (other / "x").write_text("x")
    assert str(other / "x").endswith("/etc/multikueue/kubeconfigs-other/x")
    assert path_error(str(other / "x"), str(prefix)) == (
        f'kubeconfig path is not under the allowed prefix: "{other}/x" is not under "{prefix}"'
    )


def test_the_prefix_itself_is_not_strictly_under_it(prefix):
    assert path_error(str(prefix), str(prefix)) == (
        f'kubeconfig path is not under the allowed prefix: "{prefix}" is not under "{prefix}"'
    )


def test_missing_prefix_allows_nothing(tmp_path):
    missing = tmp_path / "no-such-prefix"
    assert path_error(f"{missing}/w1", str(missing)) == (
        f'kubeconfig path is not under the allowed prefix: "{missing}/w1" is not under "{missing}"'
    )


def test_missing_file_cannot_be_resolved(prefix):
    assert path_error(f"{prefix}/absent/w9", str(prefix)) == (
        f"cannot resolve kubeconfig path symlinks: lstat {prefix}/absent: no such file or directory"
    )


def test_symlink_escaping_the_prefix_is_rejected(prefix, tmp_path):
    secret_file = tmp_path / "external-secret"
    secret_file.write_text("token")
    (prefix / "escape").symlink_to(secret_file)
    assert path_error(str(prefix / "escape"), str(prefix)) == (
        f'kubeconfig path is not under the allowed prefix: "{secret_file}" is not under "{prefix}"'
    )


def test_dangling_symlink_cannot_be_resolved(prefix, tmp_path):
    (prefix / "dangling").symlink_to(tmp_path / "gone")
    assert path_error(str(prefix / "dangling"), str(prefix)) == (
        f"cannot resolve kubeconfig path symlinks: lstat {tmp_path / 'gone'}: no such file or directory"
    )


def test_symlinks_inside_the_prefix_resolve_to_their_target(prefix):
    # The layout of a Secret volume: `kubeconfig -> ..data/kubeconfig`.
    (prefix / "..data").mkdir()
    (prefix / "..data" / "kubeconfig").write_text("x")
    (prefix / "kubeconfig").symlink_to("..data/kubeconfig")
    resolved = kc.resolve_kubeconfig_path(str(prefix / "kubeconfig"), str(prefix))
    assert resolved == str(prefix / "..data" / "kubeconfig")


def test_symlinked_prefix_is_resolved_too(prefix, tmp_path):
    alias = tmp_path / "alias"
    alias.symlink_to(prefix)
    assert kc.resolve_kubeconfig_path(f"{alias}/w1.kubeconfig", str(alias)) == str(prefix / "w1.kubeconfig")
    assert kc.resolve_kubeconfig_path(str(prefix / "w1.kubeconfig"), str(alias)) == str(
        prefix / "w1.kubeconfig"
    )


def test_read_kubeconfig_file(prefix):
    assert kc.read_kubeconfig_file(str(prefix / "w1.kubeconfig")) == as_yaml(kubeconfig())


def test_read_errors_are_bad_kubeconfig_with_go_texts(prefix):
    with pytest.raises(CredentialError) as info:
        kc.read_kubeconfig_file(f"{prefix}/absent")
    assert (info.value.reason, info.value.error) == (
        "BadKubeConfig",
        f"open {prefix}/absent: no such file or directory",
    )
    assert not info.value.not_found
    with pytest.raises(CredentialError) as info:
        kc.read_kubeconfig_file(str(prefix))
    assert info.value.error == f"read {prefix}: is a directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(prefix):
    unreadable = prefix / "w1.kubeconfig"
    unreadable.chmod(0)
    with pytest.raises(CredentialError) as info:
        kc.read_kubeconfig_file(str(unreadable))
    assert info.value.error == f"open {unreadable}: permission denied"


# ------------------------------------------------------------------------------------------------
# Kubeconfig validation: accepted shapes


def test_token_kubeconfig_is_accepted_and_returned_parsed():
    config = kubeconfig()
    assert kc.validate_kubeconfig(as_yaml(config)) == config


def test_inline_client_certificate_kubeconfig_is_accepted():
    config = kubeconfig(**{"client-certificate-data": CERT_DATA, "client-key-data": KEY_DATA})
    assert kc.validate_kubeconfig(as_yaml(config)) == config


def test_json_and_str_input_are_accepted():
    config = kubeconfig()
    assert kc.validate_kubeconfig(json.dumps(config)) == config
    assert kc.validate_kubeconfig(as_yaml(config).decode()) == config


def test_context_without_user_is_anonymous_and_accepted():
    config = kubeconfig()
    config["contexts"][0]["context"].pop("user")
    assert kc.validate_kubeconfig(as_yaml(config)) == config


@pytest.mark.parametrize(
    "server",
    [
        "https://worker1.example.com",
        "https://API.Example.COM:6443",  # lower-cased before the DNS check
        "https://10.0.0.1:6443",
        "https://127.0.0.1",
        "https://[::1]:6443",
        "https://[fd00::10]",  # brackets without a port
        "https://localhost:6443",
        "http://worker1",
        "https://user@worker1.example.com",
    ],
)
def test_trusted_server_endpoints(server):
    kc.validate_kubeconfig(as_yaml(kubeconfig(server)))


# ------------------------------------------------------------------------------------------------
# Kubeconfig validation: every rule, with its exact text


@pytest.mark.parametrize(
    "raw",
    ["clusters: [", "key: value: other", "{", "- a\n- b\n", "just a string", "42"],
)
def test_unparsable_kubeconfig(raw):
    assert insecure(raw).startswith("failed to parse kubeconfig(apiconfig): ")


def test_parse_error_message_is_one_line():
    error = insecure("clusters:\n  - name: w1\n    cluster: [\n")
    assert "\n" not in error


def test_wrongly_shaped_kubeconfigs_are_parse_errors():
    def shaped(mutate) -> str:
        config = kubeconfig()
        mutate(config)
        return insecure(as_yaml(config))

    assert shaped(lambda c: c.update(clusters={"w1": {}})) == parse_error("clusters must be a list")
    assert shaped(lambda c: c["users"].append("w2")) == parse_error("users[1] must be an object with a name")
    assert shaped(lambda c: c["users"][0].pop("name")) == parse_error(
        "users[0] must be an object with a name"
    )
    assert shaped(lambda c: c["contexts"][0].update(context="w1")) == parse_error(
        "contexts[0].context must be an object"
    )
    assert shaped(lambda c: c["clusters"][0]["cluster"].update(server=6443)) == parse_error(
        "clusters[0].cluster.server must be a str"
    )
    assert shaped(lambda c: c["clusters"][0]["cluster"].update({"insecure-skip-tls-verify": "yes"})) == (
        parse_error("clusters[0].cluster.insecure-skip-tls-verify must be a bool")
    )
    assert shaped(lambda c: c["clusters"][0]["cluster"].update({"certificate-authority-data": "!!"})) == (
        parse_error("clusters[0].cluster.certificate-authority-data must be base64-encoded data")
    )
    assert shaped(lambda c: c["users"][0]["user"].update(exec="get-token")) == parse_error(
        "users[0].user.exec must be a dict"
    )
    assert shaped(lambda c: c["clusters"].append(copy.deepcopy(c["clusters"][0]))) == parse_error(
        'duplicate name "w1" in clusters'
    )


def test_token_file_on_any_user_is_rejected():
    config = kubeconfig()
    config["users"].append({"name": "unused", "user": {"tokenFile": "/var/run/secrets/token"}})
    assert insecure(as_yaml(config)) == "tokenFile is not allowed"


def test_insecure_skip_tls_verify():
    config = kubeconfig()
    config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    assert insecure(as_yaml(config)) == "insecure TLS verification is not allowed for cluster w1"
    config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = False
    kc.validate_kubeconfig(as_yaml(config))


def test_certificate_authority_file_path():
    config = kubeconfig()
    config["clusters"][0]["cluster"] = {
        "server": "https://w1.example.com",
        "certificate-authority": "/ca.crt",
    }
    assert insecure(as_yaml(config)) == (
        "certificate-authority file paths are not allowed, use certificate-authority-data for cluster w1"
    )


def test_every_cluster_needs_a_server():
    config = kubeconfig()
    config["clusters"].append({"name": "unused", "cluster": {"certificate-authority-data": CA_DATA}})
    assert insecure(as_yaml(config)) == "server URL is required for cluster unused"
    config["clusters"][1] = {"name": "bare"}
    assert insecure(as_yaml(config)) == "server URL is required for cluster bare"


def test_missing_current_context():
    config = kubeconfig()
    del config["current-context"]
    assert insecure(as_yaml(config)) == parse_error("current-context is not set")
    assert insecure(b"") == parse_error("current-context is not set")
    assert insecure("{}") == parse_error("current-context is not set")


def test_current_context_must_exist_and_name_existing_cluster_and_user():
    config = kubeconfig()
    config["current-context"] = "w2"
    assert insecure(as_yaml(config)) == parse_error('context "w2" not found')
    config = kubeconfig()
    config["contexts"][0]["context"]["cluster"] = "w2"
    assert insecure(as_yaml(config)) == parse_error('cluster "w2" not found for context "w1"')
    config = kubeconfig()
    config["contexts"][0]["context"]["user"] = "w2"
    assert insecure(as_yaml(config)) == parse_error('user "w2" not found for context "w1"')


def test_bearer_token_file_of_the_resolved_config():
    # A kubeconfig's tokenFile is refused earlier as "tokenFile is not allowed"; this is the
    # rest-config rule underneath it, kept as a second line of defence.
    with pytest.raises(CredentialError) as info:
        kc._check_rest_config("https://w1.example.com", {"tokenFile": "/t"}, allow_exec=True)
    assert (info.value.reason, info.value.error) == ("InsecureKubeConfig", "bearerTokenFile is not allowed")


@pytest.mark.parametrize(
    "user", [{"username": "admin", "password": "secret"}, {"username": "admin"}, {"password": "p"}]
)
def test_basic_auth(user):
    assert insecure(as_yaml(kubeconfig(**user))) == "basic auth is not allowed"


def test_exec_plugin_refused_unless_allowed():
    raw = as_yaml(kubeconfig(exec=EXEC))
    assert insecure(raw) == "exec plugins are not allowed"
    assert kc.validate_kubeconfig(raw, allow_exec=True)["users"][0]["user"]["exec"] == EXEC


@pytest.mark.parametrize("allow_exec", [False, True])
def test_auth_provider(allow_exec):
    raw = as_yaml(kubeconfig(**{"auth-provider": {"name": "oidc", "config": {}}}))
    assert insecure(raw, allow_exec) == "auth providers are not allowed"


@pytest.mark.parametrize(
    "server",
    [
        "https://invalid_host.example.com",
        "https://-worker.example.com",
        "https://worker.example.com.",
        "https://" + "a" * 254,
        "worker1.example.com:6443",  # no scheme: Go's url.Parse finds no host
        "worker1",
        "https://",
        "https://:6443",
        "https://worker1.example.com:https",
        "https://[fe80::1%25eth0]:6443",  # zoned IPv6
        "https://[not-an-ip]:6443",
    ],
)
def test_untrusted_server_endpoint(server):
    assert insecure(as_yaml(kubeconfig(server))) == "untrusted server endpoint"


def test_only_the_current_contexts_endpoint_is_checked():
    config = kubeconfig()
    config["clusters"].append({"name": "other", "cluster": {"server": "https://bad_host"}})
    kc.validate_kubeconfig(as_yaml(config))


def test_rules_run_in_upstream_order():
    config = kubeconfig("https://bad_host", tokenFile="/t")
    config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    config["current-context"] = "missing"
    assert insecure(as_yaml(config)) == "tokenFile is not allowed"
    del config["users"][0]["user"]["tokenFile"]
    assert insecure(as_yaml(config)) == "insecure TLS verification is not allowed for cluster w1"
    del config["clusters"][0]["cluster"]["insecure-skip-tls-verify"]
    assert insecure(as_yaml(config)) == parse_error('context "missing" not found')
    config["current-context"] = "w1"
    config["users"][0]["user"] = {"username": "u", "exec": EXEC, "auth-provider": {"name": "oidc"}}
    assert insecure(as_yaml(config)) == "untrusted server endpoint"
    config["clusters"][0]["cluster"]["server"] = "https://w1.example.com"
    assert insecure(as_yaml(config)) == "basic auth is not allowed"
    del config["users"][0]["user"]["username"]
    assert insecure(as_yaml(config)) == "exec plugins are not allowed"
    assert insecure(as_yaml(config), allow_exec=True) == "auth providers are not allowed"


# ------------------------------------------------------------------------------------------------
# Configuration: multiKueue.clusterProfile


def provider_entry(name: str, **exec_config: object) -> dict:
    return {"name": name, "execConfig": {**EXEC, "interactiveMode": "Never", **exec_config}}


def provider_error(cfg: dict) -> str:
    with pytest.raises(ValueError) as info:
        kc.parse_access_providers(cfg)
    return str(info.value)


def test_no_cluster_profile_config_means_no_providers():
    assert kc.parse_access_providers(None) == []
    assert kc.parse_access_providers({}) == []


def test_access_providers_are_parsed_in_order():
    cfg = {"accessProviders": [provider_entry("secretreader"), provider_entry("gcp", env=[{"name": "A"}])]}
    assert kc.parse_access_providers(cfg) == [
        AccessProvider("secretreader", {**EXEC, "interactiveMode": "Never"}),
        AccessProvider("gcp", {**EXEC, "interactiveMode": "Never", "env": [{"name": "A"}]}),
    ]


def test_credentials_providers_are_used_when_access_providers_are_empty():
    cfg = {"accessProviders": [], "credentialsProviders": [provider_entry("legacy")]}
    assert [p.name for p in kc.parse_access_providers(cfg)] == ["legacy"]


def test_access_and_credentials_providers_are_exclusive():
    cfg = {"accessProviders": [provider_entry("a")], "credentialsProviders": [provider_entry("b")]}
    assert provider_error(cfg) == (
        "multiKueue.clusterProfile.credentialsProviders: Forbidden: "
        "must not be specified when accessProviders is specified"
    )


def test_required_provider_fields():
    cfg = {"accessProviders": [{"execConfig": {"args": ["x"]}}]}
    path = "multiKueue.clusterProfile.accessProviders[0]"
    assert provider_error(cfg) == (
        f"[{path}.name: Required value: must be specified, "
        f"{path}.execConfig.command: Required value: must be specified, "
        f"{path}.execConfig.apiVersion: Required value: must be specified, "
        f"{path}.execConfig.interactiveMode: Required value: must be specified]"
    )


def test_provider_env_names_and_interactive_mode():
    cfg = {"credentialsProviders": [provider_entry("p", env=[{"value": "v"}], interactiveMode="Sometimes")]}
    path = "multiKueue.clusterProfile.credentialsProviders[0].execConfig"
    assert provider_error(cfg) == (
        f"[{path}.env[0].name: Required value: must be specified, "
        f'{path}.interactiveMode: Unsupported value: "Sometimes": supported values: '
        '"Never", "IfAvailable", "Always"]'
    )


# ------------------------------------------------------------------------------------------------
# ClusterProfile -> kubeconfig


def cluster_profile(*providers: tuple[str, dict], field: str = "accessProviders") -> dict:
    entries = [{"name": name, "cluster": cluster} for name, cluster in providers]
    return {
        "apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "ClusterProfile",
        "metadata": {"name": "p", "namespace": "kueue-system"},
        "status": {field: entries},
    }


def cluster(server: str = "https://worker1.example.com:6443", **extra: object) -> dict:
    return {"server": server, "certificate-authority-data": CA_DATA, **extra}


SECRETREADER = AccessProvider(
    "secretreader",
    {**EXEC, "env": [{"name": "A", "value": "1"}], "interactiveMode": "IfAvailable", "installHint": "x"},
)
GCP = AccessProvider("gcp", {**EXEC, "command": "gcp-auth", "interactiveMode": "Never"})


def profile_error(
    profile: dict | None, providers: list[AccessProvider], enabled: bool = True
) -> CredentialError:
    with pytest.raises(CredentialError) as info:
        kc.kubeconfig_from_cluster_profile(profile, "p", providers, enabled)
    return info.value


def test_feature_gate_off():
    for profile in (None, cluster_profile(("secretreader", cluster()))):
        error = profile_error(profile, [SECRETREADER], enabled=False)
        assert (error.reason, error.error) == (
            "MultiKueueClusterProfileFeatureDisabled",
            "MultiKueueClusterProfile feature gate is disabled",
        )
        assert error.message == "load client config failed: MultiKueueClusterProfile feature gate is disabled"
        assert not error.not_found


def test_missing_profile_is_not_found():
    error = profile_error(None, [SECRETREADER])
    assert (error.reason, error.error) == (
        "BadClusterProfile",
        'ClusterProfile.multicluster.x-k8s.io "p" not found',
    )
    assert error.not_found


def test_no_access_provider_configured():
    error = profile_error(cluster_profile(("secretreader", cluster())), [])
    assert (error.reason, error.error, error.not_found) == (
        "BadClusterProfile",
        "no access provider configured",
        False,
    )


def test_no_matching_cluster_accessor():
    error = profile_error(cluster_profile(("other", cluster())), [SECRETREADER, GCP])
    assert (error.reason, error.error) == (
        "BadClusterProfile",
        'no matching cluster accessor found for cluster profile "p"',
    )
    assert profile_error({"metadata": {"name": "p"}}, [GCP]).error == error.error


def test_provider_without_exec_config():
    error = profile_error(cluster_profile(("bare", cluster())), [AccessProvider("bare", {})])
    assert (error.reason, error.error) == ("BadClusterProfile", 'no exec config found for provider "bare"')


def test_kubeconfig_built_from_the_matching_provider():
    profile = cluster_profile(("secretreader", cluster(**{"proxy-url": "http://proxy:3128"})))
    config = kc.kubeconfig_from_cluster_profile(profile, "p", [SECRETREADER], True)
    assert config == {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "p",
                "cluster": {
                    "server": "https://worker1.example.com:6443",
                    "certificate-authority-data": CA_DATA,
                    "proxy-url": "http://proxy:3128",
                },
            }
        ],
        "users": [
            {
                "name": "p",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": "get-token",
                        "args": ["--x"],
                        "env": [{"name": "A", "value": "1"}],
                        "interactiveMode": "Never",  # forced, the provider said IfAvailable
                    }
                },
            }
        ],
        "contexts": [{"name": "p", "context": {"cluster": "p", "user": "p"}}],
        "current-context": "p",
    }


def test_profile_kubeconfig_needs_allow_exec():
    config = kc.kubeconfig_from_cluster_profile(cluster_profile(("gcp", cluster())), "p", [GCP], True)
    assert kc.validate_kubeconfig(json.dumps(config), allow_exec=True) == config
    assert insecure(json.dumps(config)) == "exec plugins are not allowed"


def test_first_configured_provider_wins_not_the_profiles_order():
    profile = cluster_profile(("gcp", cluster("https://gcp.example.com")), ("secretreader", cluster()))
    config = kc.kubeconfig_from_cluster_profile(profile, "p", [SECRETREADER, GCP], True)
    assert config["clusters"][0]["cluster"]["server"] == "https://worker1.example.com:6443"
    assert config["users"][0]["user"]["exec"]["command"] == "get-token"
    config = kc.kubeconfig_from_cluster_profile(profile, "p", [GCP, SECRETREADER], True)
    assert config["clusters"][0]["cluster"]["server"] == "https://gcp.example.com"
    assert config["users"][0]["user"]["exec"]["command"] == "gcp-auth"


def test_access_providers_are_preferred_over_credential_providers():
    profile = cluster_profile(("gcp", cluster("https://new.example.com")))
    profile["status"]["credentialProviders"] = [
        {"name": "gcp", "cluster": cluster("https://old.example.com")}
    ]
    config = kc.kubeconfig_from_cluster_profile(profile, "p", [GCP], True)
    assert config["clusters"][0]["cluster"]["server"] == "https://new.example.com"


def test_deprecated_credential_providers_still_match():
    profile = cluster_profile(("gcp", cluster("https://old.example.com")), field="credentialProviders")
    config = kc.kubeconfig_from_cluster_profile(profile, "p", [GCP], True)
    assert config["clusters"][0]["cluster"]["server"] == "https://old.example.com"


def test_exec_extension_reaches_the_plugin_as_env_and_as_cluster_config():
    extension = {"audience": "worker1", "scopes": ["a", "b"]}
    extensions = [
        {"name": "client.authentication.k8s.io/exec-args", "extension": ["--ignored"]},
        {"name": "client.authentication.k8s.io/exec", "extension": extension},
    ]
    profile = cluster_profile(("secretreader", cluster(extensions=extensions)))
    config = kc.kubeconfig_from_cluster_profile(profile, "p", [SECRETREADER], True)
    exec_config = config["users"][0]["user"]["exec"]
    assert exec_config["args"] == ["--x"]  # profile-sourced args are ignored
    assert exec_config["env"] == [
        {"name": "A", "value": "1"},
        {"name": kc.CLUSTER_EXEC_CONFIG_ENV, "value": json.dumps(extension)},
    ]
    assert kc.CLUSTER_EXEC_CONFIG_ENV == "KUEUE_CLUSTER_EXEC_CONFIG"
    # Only the exec extension is kept: a plugin with provideClusterInfo gets it as spec.cluster.config.
    assert config["clusters"][0]["cluster"]["extensions"] == [
        {"name": "client.authentication.k8s.io/exec", "extension": extension}
    ]
    exec_config["provideClusterInfo"] = True
    plugin = credentials.from_kubeconfig_dict(config).exec_plugin
    assert plugin is not None and plugin.cluster_info is not None
    assert plugin.cluster_info["config"] == extension
    assert SECRETREADER.exec_config["env"] == [{"name": "A", "value": "1"}]  # provider not mutated


@pytest.mark.parametrize(
    ("profile_cluster", "error"),
    [
        (cluster("https://bad_host.example.com"), "untrusted server endpoint"),
        ({"certificate-authority-data": CA_DATA}, "server URL is required for cluster p"),
        (cluster(**{"certificate-authority-data": "%%"}), None),
    ],
)
def test_invalid_rest_config_from_profile(profile_cluster, error):
    failure = profile_error(cluster_profile(("gcp", profile_cluster)), [GCP])
    assert failure.reason == "BadRestConfig"
    assert not failure.not_found
    if error is None:
        assert failure.error.startswith("failed to parse kubeconfig(apiconfig): ")
    else:
        assert failure.error == error


@pytest.mark.parametrize(
    "raw",
    [
        "users:\n- name: x\n  user:\n    token: abc: secret-token-123\n",
        "users: [{name: x, user: {token: secret-token-123}\n",
        b"users: secret-token-123\n\xff",
    ],
)
def test_parse_errors_do_not_quote_the_kubeconfig(raw):
    """The text goes to the Active condition and to the logs: no excerpt of a line with a token."""
    error = insecure(raw)
    assert error.startswith("failed to parse kubeconfig(apiconfig): yaml: "), error
    assert "secret-token" not in error


def test_parse_errors_name_the_line():
    assert insecure("users:\n- name: x\n  user:\n    token: abc: d\n") == (
        "failed to parse kubeconfig(apiconfig): yaml: line 4: mapping values are not allowed here"
    )


# ------------------------------------------------------------------------------------------------
# What to renew when the worker answers 401


def _self_signed(not_before, not_after) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kueue-multikueue")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .sign(key, hashes.SHA256())
    )
    return base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode()


def test_credentials_hint_names_an_expired_or_early_certificate_or_the_token():
    import datetime as dt

    now = dt.datetime(2026, 1, 10, tzinfo=dt.UTC)
    day = dt.timedelta(days=1)
    expired = kubeconfig(**{"client-certificate-data": _self_signed(now - 2 * day, now - day)})
    assert kc.credentials_hint(expired, now) == "the client certificate expired at 2026-01-09T00:00:00Z"
    early = kubeconfig(**{"client-certificate-data": _self_signed(now + day, now + 2 * day)})
    not_yet = "the client certificate is not valid before 2026-01-11T00:00:00Z"
    assert kc.credentials_hint(early, now) == not_yet
    valid = kubeconfig(**{"client-certificate-data": _self_signed(now - day, now + day)})
    assert kc.credentials_hint(valid, now) == "the worker does not trust the client certificate"
    token = kubeconfig(token="secret-token")
    assert kc.credentials_hint(token, now) == "the worker does not accept the token (expired or revoked?)"
    assert "secret-token" not in kc.credentials_hint(token, now)
