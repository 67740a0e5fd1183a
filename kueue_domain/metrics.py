"""Metrics both processes export the same way: the requests their API clients sent."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily


class ClientRequestsCollector:
    """Requests sent by a process's API clients (the worker_agent's or the manager's), read from
    `KubeClient.request_counts` at scrape time.

    `rest_client_requests_total{code,host,method}` is client-go's series (what controller-runtime
    exports for Kueue); `kueue_worker_agent_api_requests_total{client,method,resource,code}` also
    says what the requests were for (`workloads/status`, `events`, ...) and which client (`main`
    shares the clientConnection QPS budget, `events` has its own) sent them.
    """

    def __init__(self, clients: dict[str, Any]) -> None:
        self.clients = clients

    def collect(self) -> Iterable[CounterMetricFamily]:
        rest = CounterMetricFamily(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            labels=("code", "host", "method"),
        )
        ours = CounterMetricFamily(
            "kueue_worker_agent_api_requests",
            "API requests sent by the worker_agent, by client, method, resource and status code.",
            labels=("client", "method", "resource", "code"),
        )
        by_host: dict[tuple[str, str, str], int] = {}
        seen: set[int] = set()
        for name, client in self.clients.items():
            if id(client) in seen:
                continue
            seen.add(id(client))
            host = client.host.split("://", 1)[-1]
            for (method, resource, code), count in sorted(client.request_counts.items()):
                ours.add_metric((name, method, resource, code), count)
                key = (code, host, method)
                by_host[key] = by_host.get(key, 0) + count
        for labels, count in sorted(by_host.items()):
            rest.add_metric(labels, count)
        return [rest, ours]
