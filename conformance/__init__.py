"""`make conformance`: upstream Kueue's MultiKueue e2e suites run against a fleet of ours
(docs/conformance.md)."""
