"""The Configuration's `tls` (TLSOptions): Go's names checked as upstream checks them, then applied
to our servers' TLS contexts, so that a client below `minVersion` or offering none of the
`cipherSuites` is refused at the handshake."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from kube_runtime.httpserver import ServingCertificate
from kube_runtime.tlsoptions import TLSOptions, parse_tls_options
from kueue_domain.config import ConfigError, parse_config


def test_the_configuration_reads_tls_and_the_gate_decides_whether_servers_apply_it():
    config = parse_config({"tls": {"minVersion": "VersionTLS13"}})
    assert config.server_tls == TLSOptions("VersionTLS13")
    off = parse_config({"tls": {"minVersion": "VersionTLS13"}, "featureGates": {"TLSOptions": False}})
    assert off.tls is not None and off.server_tls is None
    assert parse_config({}).server_tls is None


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"minVersion": "VersionTLS11"}, "tls.minVersion: invalid minVersion VersionTLS11. Please use"),
        ({"minVersion": "TLS1.2"}, 'tls.minVersion: invalid minVersion: unknown tls version "TLS1.2"'),
        (
            {"cipherSuites": ["TLS_RSA_WITH_RC4_128_SHA"]},
            "tls.cipherSuites: invalid cipher suites: Cipher suite TLS_RSA_WITH_RC4_128_SHA not supported",
        ),
        (
            {"minVersion": "VersionTLS13", "cipherSuites": ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]},
            "tls.cipherSuites: may not be specified when `minVersion` is 'VersionTLS13'",
        ),
        ({"curvePreferences": [99]}, "tls.curvePreferences: invalid curve preferences: [99]"),
    ],
)
def test_bad_tls_settings_are_refused_with_the_field_named(raw, problem):
    assert parse_tls_options(raw)[1][0].startswith(problem)
    with pytest.raises(ConfigError) as err:
        parse_config({"tls": raw})
    assert problem in str(err.value)


async def _handshake(server_context: ssl.SSLContext, client_context: ssl.SSLContext) -> str:
    """The TLS version a client negotiates with a server of `server_context`, or the error."""

    async def serve(reader, writer):
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context)
        version = writer.get_extra_info("ssl_object").version()
        writer.close()
        return version
    except (ssl.SSLError, ConnectionError) as exc:
        return f"refused: {type(exc).__name__}"
    finally:
        server.close()


def _client(max_version: ssl.TLSVersion, ciphers: str | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.maximum_version = max_version
    if ciphers:
        context.set_ciphers(ciphers)
    return context


async def test_a_server_with_tls13_minimum_refuses_a_tls12_client():
    server = ServingCertificate(None, TLSOptions("VersionTLS13")).context
    assert (await _handshake(server, _client(ssl.TLSVersion.TLSv1_2))).startswith("refused")
    assert await _handshake(server, _client(ssl.TLSVersion.TLSv1_3)) == "TLSv1.3"
    default = ServingCertificate(None).context
    assert await _handshake(default, _client(ssl.TLSVersion.TLSv1_2)) == "TLSv1.2"


async def test_a_server_offers_only_the_named_tls12_suites():
    tls = TLSOptions(cipher_suites=("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",))
    server = ServingCertificate(None, tls).context
    other = _client(ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-GCM-SHA256")
    assert (await _handshake(server, other)).startswith("refused")
    named = _client(ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES256-GCM-SHA384")
    assert await _handshake(server, named) == "TLSv1.2"
