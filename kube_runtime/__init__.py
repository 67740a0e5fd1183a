"""kube_runtime: the generic Kubernetes runtime both processes stand on (REST client, informers,
work queues, controllers, events, leader election, HTTP servers); it knows nothing of Kueue."""
