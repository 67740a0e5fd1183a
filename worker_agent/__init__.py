"""worker_agent."""
