"""integrations."""
