"""kube_runtime."""
