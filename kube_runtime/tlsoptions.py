"""TLS settings for our servers in Go's vocabulary (a Configuration's `tls`: `minVersion`,
`cipherSuites`, `curvePreferences`, as Kubernetes components name them), applied to Python
`ssl.SSLContext`s.

Go's cipher-suite names are mapped to OpenSSL's; TLS 1.3's suites are not configurable (as in Go),
so naming one does nothing for TLS 1.3 handshakes, and naming any while `minVersion` is
`VersionTLS13` is refused. Curves are Go's CurveID numbers; OpenSSL takes the first one named.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

VERSIONS = {"VersionTLS12": ssl.TLSVersion.TLSv1_2, "VersionTLS13": ssl.TLSVersion.TLSv1_3}
REFUSED_VERSIONS = ("VersionTLS10", "VersionTLS11")

# Go's crypto/tls names (and component-base's two aliases) -> OpenSSL's, for the TLS 1.2 suites
# an OpenSSL 3 server offers. TLS 1.3's three names are accepted and map to nothing.
CIPHER_SUITES: Mapping[str, str] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_AES_128_GCM_SHA256": "",
    "TLS_AES_256_GCM_SHA384": "",
    "TLS_CHACHA20_POLY1305_SHA256": "",
}
# Go's CurveID numbers -> OpenSSL's group names.
CURVES: Mapping[int, str] = {23: "prime256v1", 24: "secp384r1", 25: "secp521r1", 29: "X25519"}


@dataclass(frozen=True)
class TLSOptions:
    min_version: str = "VersionTLS12"
    cipher_suites: tuple[str, ...] = ()
    curve_preferences: tuple[int, ...] = ()

    def apply(self, context: ssl.SSLContext) -> ssl.SSLContext:
        """Set the minimum version, the TLS 1.2 suites and the first curve on `context`."""
        context.minimum_version = VERSIONS[self.min_version]
        openssl = [CIPHER_SUITES[name] for name in self.cipher_suites if CIPHER_SUITES[name]]
        if openssl:
            context.set_ciphers(":".join(openssl))
        if self.curve_preferences:
            context.set_ecdh_curve(CURVES[self.curve_preferences[0]])
        return context


def parse_tls_options(raw: Any, path: str = "tls") -> tuple[TLSOptions | None, list[str]]:
    """A `tls` block (None when absent) and the problems found in it, each naming its field."""
    if raw is None:
        return None, []
    problems: list[str] = []
    version = raw.get("minVersion") or "VersionTLS12"
    if version in REFUSED_VERSIONS:
        problems.append(
            f"{path}.minVersion: invalid minVersion {version}. Please use VersionTLS12 or VersionTLS13"
        )
    elif version not in VERSIONS:
        problems.append(
            f'{path}.minVersion: invalid minVersion: unknown tls version "{version}". '
            "Please use VersionTLS12 or VersionTLS13"
        )
    suites = tuple(raw.get("cipherSuites") or ())
    unknown = [s for s in suites if s not in CIPHER_SUITES]
    if unknown:
        secure = ", ".join(n for n, o in CIPHER_SUITES.items() if o.startswith("ECDHE") or not o)
        problems.append(
            f"{path}.cipherSuites: invalid cipher suites: Cipher suite {unknown[0]} not supported or doesn't "
            f"exist. Please use the secure cipher names: {secure}"
        )
    if version == "VersionTLS13" and suites:
        problems.append(f"{path}.cipherSuites: may not be specified when `minVersion` is 'VersionTLS13'")
    curves = tuple(raw.get("curvePreferences") or ())
    bad_curves = [c for c in curves if c not in CURVES]
    if bad_curves:
        known = ", ".join(f"{n} ({name})" for n, name in CURVES.items())
        problems.append(f"{path}.curvePreferences: invalid curve preferences: {bad_curves}; one of {known}")
    if problems:
        return None, problems
    return TLSOptions(version, suites, curves), []
