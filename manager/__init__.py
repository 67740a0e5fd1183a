"""The MultiKueue manager: from the manager cluster, it dispatches Workloads to worker clusters
(copies, dispatchers, the job on the admitting worker), mirrors their status back, and keeps the
MultiKueueCluster and AdmissionCheck conditions (docs/multikueue.md)."""
