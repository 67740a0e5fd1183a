"""kueue_domain: Kueue's objects and configuration, shared by the manager and the worker_agent:
its API strings (api/), feature gates, v1beta1 <-> v1beta2 conversion, Configuration and Workloads."""

# Registers Kueue's codec with kube_runtime's client (kube_runtime/codec.py) on first import.
from kueue_domain import conversion as _conversion  # noqa: F401
