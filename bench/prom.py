"""Prometheus text: parsing, sums by label, counter deltas, histogram quantiles; /metrics scrapes of
our processes and upstream Kueue's; the kube-apiserver's request counts (apiserver_request_total)."""

from __future__ import annotations

import contextlib
import math
import re
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import say

# ==============================================================================================
# Prometheus text and histograms (pure)
# ==============================================================================================


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        match = _LABEL.match(text, pos)
        if match is None:
            if text[pos:].strip(" ,"):
                raise ValueError(f"bad label set {{{text}}}")
            break
        labels[match.group(1)] = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], match.group(2))
        pos = match.end()
    return labels


def parse_prometheus_text(text: str) -> list[Sample]:
    """Every sample of a text exposition (version 0.0.4); comments and malformed lines are skipped."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            labels = _parse_labels(match.group(2) or "")
            value = float(match.group(3))
        except ValueError:
            continue
        samples.append(Sample(match.group(1), labels, value))
    return samples


def _matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def metric_sum(samples: Iterable[Sample], name: str, **selector: str) -> float:
    """Sum of the samples of `name` whose labels include `selector` (0 when there are none)."""
    return sum(s.value for s in samples if s.name == name and _matches(s.labels, selector))


def metric_by_label(samples: Iterable[Sample], name: str, label: str, **selector: str) -> dict[str, float]:
    """Samples of `name` summed per value of `label`."""
    out: dict[str, float] = {}
    for s in samples:
        if s.name == name and _matches(s.labels, selector):
            key = s.labels.get(label, "")
            out[key] = out.get(key, 0.0) + s.value
    return out


def counter_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """after - before per key; a key whose counter went down (the process restarted, a worker
    reconnected) counts from 0."""
    out = {}
    for key, value in after.items():
        previous = before.get(key, 0.0)
        out[key] = value - previous if value >= previous else value
    return out


Buckets = list[tuple[float, float]]  # (upper bound `le`, cumulative count), sorted by le


def histogram_buckets(samples: Iterable[Sample], name: str, **selector: str) -> Buckets:
    """The cumulative buckets of histogram `name` (its `_bucket` series), summed over the label sets
    that match `selector`."""
    by_le: dict[float, float] = {}
    for s in samples:
        if s.name == f"{name}_bucket" and _matches(s.labels, selector) and "le" in s.labels:
            le = float(s.labels["le"])
            by_le[le] = by_le.get(le, 0.0) + s.value
    return sorted(by_le.items())


def buckets_delta(before: Buckets, after: Buckets) -> Buckets:
    """The observations between two scrapes, bucket by bucket."""
    previous = dict(before)
    return [(le, max(0.0, count - previous.get(le, 0.0))) for le, count in after]


def histogram_quantile(q: float, buckets: Buckets) -> float | None:
    """Prometheus's histogram_quantile: linear interpolation inside the bucket that holds rank q*n.
    The first bucket starts at 0; a rank in the +Inf bucket gives the largest finite bound. None
    without observations."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    if not buckets or not math.isinf(buckets[-1][0]):
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for index, (bound, count) in enumerate(buckets):
        if count >= rank and count > previous_count:
            if math.isinf(bound):
                return buckets[index - 1][0] if index > 0 else None
            if index == 0 and bound <= 0:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (
                count - previous_count
            )
        previous_bound, previous_count = bound, count
    return buckets[-2][0] if len(buckets) > 1 else None


def parse_prometheus_counters(text: str, names: Iterable[str]) -> dict[str, float]:
    """Sum of every sample of each named metric (all label sets); names absent from the text are left out."""
    wanted = set(names)
    out: dict[str, float] = {}
    for s in parse_prometheus_text(text):
        if s.name in wanted:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


# ==============================================================================================
# The kube-apiserver's request counts (apiserver_request_total)
# ==============================================================================================

APISERVER_REQUESTS = "apiserver_request_total"
WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE")


def api_write_counts(text: str) -> dict[str, int]:
    """`apiserver_request_total` write samples summed by `<verb> <resource>[/<subresource>]`."""
    out: dict[str, int] = {}
    for s in parse_prometheus_text(text):
        if s.name != APISERVER_REQUESTS or s.labels.get("verb") not in WRITE_VERBS:
            continue
        key = f"{s.labels['verb']} {s.labels.get('resource', '')}"
        if s.labels.get("subresource"):
            key += f"/{s.labels['subresource']}"
        out[key] = out.get(key, 0) + int(s.value)
    return out


def apiserver_requests(
    before: Mapping[str, Sequence[Sample]],
    after: Mapping[str, Sequence[Sample]],
    group: str | None = None,
) -> dict[str, float]:
    """Requests each cluster's apiserver served between two scrapes (apiserver_request_total, every
    verb and code), optionally only those of one API group. Keys: cluster names."""
    selector = {} if group is None else {"group": group}
    out = {}
    for cluster, samples in after.items():
        now = metric_sum(samples, APISERVER_REQUESTS, **selector)
        then = metric_sum(before.get(cluster) or [], APISERVER_REQUESTS, **selector)
        out[cluster] = now - then if now >= then else now
    return out


def request_kind(labels: Mapping[str, str]) -> str:
    """An apiserver_request_total sample's kind of request: `<VERB> <group>/<resource>[/<subresource>]`
    (group `core` for the core API; a non-resource request is `<VERB> nonresource`)."""
    resource = labels.get("resource", "")
    if not resource:
        return f"{labels.get('verb', '')} nonresource"
    key = f"{labels.get('verb', '')} {labels.get('group') or 'core'}/{resource}"
    if labels.get("subresource"):
        key += f"/{labels['subresource']}"
    return key


def apiserver_requests_by_kind(
    before: Mapping[str, Sequence[Sample]], after: Mapping[str, Sequence[Sample]]
) -> dict[str, float]:
    """Requests every cluster's apiserver served between two scrapes, summed over the clusters by kind
    of request (`request_kind`), every response code counted."""
    out: dict[str, float] = {}
    for cluster, samples in after.items():
        then: dict[str, float] = {}
        for s in before.get(cluster) or []:
            if s.name == APISERVER_REQUESTS:
                kind = request_kind(s.labels)
                then[kind] = then.get(kind, 0.0) + s.value
        now: dict[str, float] = {}
        for s in samples:
            if s.name == APISERVER_REQUESTS:
                kind = request_kind(s.labels)
                now[kind] = now.get(kind, 0.0) + s.value
        for kind, value in now.items():
            delta = value - then.get(kind, 0.0)
            out[kind] = out.get(kind, 0.0) + (delta if delta >= 0 else value)
    return out


def apiserver_metrics(kubectl: str | Path, kubeconfig: str | Path, save_to: Path | None = None) -> str | None:
    """A kube-apiserver's whole /metrics (`kubectl get --raw`, the admin kubeconfig), kept in `save_to`;
    None (and a message) when it cannot be read."""
    cmd = [str(kubectl), "--kubeconfig", str(kubeconfig), "get", "--raw", "/metrics"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        say(f"could not read the apiserver's /metrics ({kubeconfig}): {e}")
        return None
    if res.returncode != 0:
        say(f"could not read the apiserver's /metrics ({kubeconfig}): {res.stderr.strip()}")
        return None
    if save_to is not None:
        with contextlib.suppress(OSError):
            save_to.write_text(res.stdout)
    return res.stdout


# ==============================================================================================
# /metrics of our processes and upstream Kueue's (HTTPS, a bearer token)
# ==============================================================================================


def scrape(url: str | None, save_to: Path | None = None, bearer_token: str | None = None) -> list[Sample]:
    """One /metrics read ([] without a URL or on failure), with `bearer_token` when given. An HTTPS
    endpoint on 127.0.0.1 (ours: self-signed; upstream Kueue's: the fleet CA's) is not verified."""
    if url is None:
        return []
    request = urllib.request.Request(url)
    context = None
    if bearer_token is not None:
        request.add_header("Authorization", f"Bearer {bearer_token}")
    if url.startswith("https://"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:
            text = resp.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        say(f"could not read {url}: {e}")
        return []
    if save_to is not None:
        save_to.write_text(text)
    return parse_prometheus_text(text)
