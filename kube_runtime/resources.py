"""Kubernetes REST resources: `Resource` (group, version, plural, kind, namespaced) with its URL
paths, `parse_api_path` (the inverse) and the resources of Kubernetes' own API groups.

A domain layer defines its own kinds with `Resource` (Kueue's: kueue_domain/api/resources.py).
"""

from __future__ import annotations

from dataclasses import dataclass

CORE_GROUP = ""


@dataclass(frozen=True)
class Resource:
    """One REST resource: enough to build its URLs and name its kind."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """`v1` for the core group, `group/version` otherwise (the objects' apiVersion)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def gvk(self) -> str:
        """Go's `GroupVersionKind.String()`: `batch/v1, Kind=Job`; core renders as `/v1, Kind=Pod`."""
        return f"{self.group}/{self.version}, Kind={self.kind}"

    @property
    def group_prefix(self) -> str:
        """`/api/v1` for the core group, `/apis/<group>/<version>` otherwise."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def api_path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """URL path of a collection or one object; a namespaced collection without a namespace spans all."""
        parts = [self.group_prefix]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        elif self.namespaced and name is not None:
            raise ValueError(f"{self.kind} {name!r} is namespaced: a namespace is required")
        parts.append(self.plural)
        if name is not None:
            if not name:
                raise ValueError(f"{self.kind}: empty name")
            parts.append(name)
            if subresource:
                parts.append(subresource)
        elif subresource:
            raise ValueError(f"{self.kind}: a subresource needs an object name")
        return "/".join(parts)


def parse_api_path(path: str) -> tuple[str, str, str]:
    """(group/version, resource, subresource) of a request path, the inverse of `api_path`:
    `/apis/batch/v1/namespaces/n/jobs/j/status` gives ("batch/v1", "jobs", "status"),
    `/api/v1/namespaces/n` ("v1", "namespaces", "").
    Other paths (discovery, /version) give their first two segments as the group/version."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[0] == "api":
        group_version, rest = parts[1:2], parts[2:]
    elif parts[0] == "apis":
        group_version, rest = parts[1:3], parts[3:]
    else:
        return "/".join(parts[:2]), "", ""
    if len(rest) > 2 and rest[0] == "namespaces":
        rest = rest[2:]  # namespaces/<ns>/<resource>...
    resource = rest[0] if rest else ""
    subresource = rest[2] if len(rest) > 2 else ""
    return "/".join(group_version), resource, subresource


# Kubernetes' own kinds that we read or write.
POD = Resource(CORE_GROUP, "v1", "pods", "Pod", True)
NAMESPACE = Resource(CORE_GROUP, "v1", "namespaces", "Namespace", False)
SECRET = Resource(CORE_GROUP, "v1", "secrets", "Secret", True)
CONFIG_MAP = Resource(CORE_GROUP, "v1", "configmaps", "ConfigMap", True)
NODE = Resource(CORE_GROUP, "v1", "nodes", "Node", False)
LIMIT_RANGE = Resource(CORE_GROUP, "v1", "limitranges", "LimitRange", True)
EVENT = Resource("events.k8s.io", "v1", "events", "Event", True)
LEASE = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
JOB = Resource("batch", "v1", "jobs", "Job", True)
STATEFUL_SET = Resource("apps", "v1", "statefulsets", "StatefulSet", True)
DEPLOYMENT = Resource("apps", "v1", "deployments", "Deployment", True)
RUNTIME_CLASS = Resource("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False)
PRIORITY_CLASS = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)

CUSTOM_RESOURCE_DEFINITION = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)

# Admission webhook and aggregated API registration.
API_SERVICE = Resource("apiregistration.k8s.io", "v1", "apiservices", "APIService", False)
MUTATING_WEBHOOK_CONFIGURATION = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    False,
)
VALIDATING_WEBHOOK_CONFIGURATION = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    False,
)
