"""worker_agent: the per-cluster process that admits Workloads as Kueue does (admission engine, queue
and Workload controllers, job integrations, webhooks, visibility API)."""
