"""kueue_domain: Kueue's objects and configuration, shared by the manager and the worker_agent."""
