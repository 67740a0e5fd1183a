"""The worker_agent's status controllers: ClusterQueues and LocalQueues, and Workloads' status that
is not the scheduler's own decision."""
