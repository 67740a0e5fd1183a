"""A local fleet of real Kubernetes control planes (one manager, N workers) on 127.0.0.1, without Docker.

`python3 hack/localfleet.py COMMAND` (or `python -m localfleet COMMAND` in the project's .venv) runs
it; docs/local-fleet.md describes the commands, and which module does what:

  common      paths, the fleet's names, log and FleetError
  binaries    versions (hack/versions.env), the binary cache and the Go builds (`build`)
  pki         the run's CA, certificates and kubeconfigs (the X.509 work is kube_runtime.certs')
  ports       ports for every listener, each handed out once and reserved until used
  supervisor  the program that keeps one process running (kubelet's back-off); run as a script
  processes   state.json, starting processes under the supervisor, stopping them (`down`)
  kube        kubectl, probes, /metrics with the metrics reader's token, quantities
  cluster     one cluster's control plane: etcd, kube-apiserver, controllers, kwok, nodes, LWS
  ours        our worker_agent and federation manager
  upstream    upstream Kueue in their place (`up --upstream-kueue`)
  fleet       FleetUp: `up`, step by step, from the three above
  multikueue  the MultiKueue setup guide's objects and names, the sample LeaderWorkerSet
  cli         the command line

The names below are the ones the tests and benchmarks use: `import localfleet; localfleet.fleet_worker(...)`.
"""

from __future__ import annotations

from localfleet.binaries import (
    K8S_COMMANDS,
    KEEP_RUNNING_ANNOTATION,
    KWOK_STAGE_FILES,
    Binaries,
    Builder,
    crd_docs,
    read_versions,
)
from localfleet.cli import (
    go_duration,
    main,
)
from localfleet.cluster import (
    ClusterPlan,
    FleetOptions,
    etcd_prefix,
    runs_pods,
)
from localfleet.common import (
    AGENT_COMPONENT,
    AGENT_FRAMEWORKS,
    AGENT_NAMESPACE,
    ANNOTATION_WORKER_CLUSTER,
    CACHE,
    DEFAULT_FLAVOR,
    DEFAULT_RUN_DIR,
    DEFAULT_WORKER_LOST_TIMEOUT,
    DISPATCHERS,
    KUEUE_API,
    KUEUE_COMPONENTS,
    MANAGER,
    MANAGER_COMPONENT,
    MULTIKUEUE_ORIGIN,
    OUR_COMPONENTS,
    PROJECT,
    REPO,
    UPSTREAM_KUEUE_COMPONENT,
    WEBHOOKS_COMPONENT,
    FleetError,
    b64,
    fmt_duration,
    log,
    write_file,
)
from localfleet.fleet import (
    MULTIKUEUE_USER,
    FleetUp,
)
from localfleet.kube import (
    METRICS_READER,
    METRICS_TOKEN_FILE,
    Kubectl,
    apiservice_available,
    cluster_metrics_token,
    http_ok,
    https_ok,
    metrics_reader_objects,
    metrics_reader_token,
    metrics_summary,
    read_metrics,
    sum_quantities,
    tls_port_open,
)
from localfleet.multikueue import (
    MAX_MULTIKUEUE_CLUSTERS,
    SAMPLE_JOB_FILE,
    SAMPLE_LWS_FILE,
    SAMPLE_LWS_TIMEOUT,
    SETUP_ADMISSION_CHECK,
    SETUP_CLUSTER_QUEUE,
    SETUP_LOCAL_QUEUE,
    SETUP_MULTIKUEUE_CONFIG,
    SETUP_NAMESPACE,
    WorkerSetup,
    describe_lws_workloads,
    fleet_worker,
    guide_checks,
    localfleet_command,
    lws_replicas,
    multikueue_cluster_name,
    multikueue_setup_objects,
    next_steps,
    sample_lws,
    sample_lws_manifest,
    sample_lws_next_steps,
    sample_lws_placement,
    setup_multikueue,
)
from localfleet.ours import (
    VISIBILITY_GROUP,
    VISIBILITY_VERSIONS,
    visibility_api_objects,
)
from localfleet.pki import (
    CertificateAuthority,
    kubeconfig,
)
from localfleet.ports import (
    PortAllocator,
    free_port,
)
from localfleet.processes import (
    SUPERVISOR,
    State,
    child_pid,
    down,
    fleet_is_running,
    pid_alive,
    pid_is_ours,
    project_env,
    project_python,
    rss_mib,
    stop_processes,
    supervised_status,
    wait_for,
)
from localfleet.upstream import (
    upstream_kueue_clusters,
    upstream_kueue_config,
)

__all__ = [
    "AGENT_COMPONENT",
    "AGENT_FRAMEWORKS",
    "AGENT_NAMESPACE",
    "ANNOTATION_WORKER_CLUSTER",
    "CACHE",
    "DEFAULT_FLAVOR",
    "DEFAULT_RUN_DIR",
    "DEFAULT_WORKER_LOST_TIMEOUT",
    "DISPATCHERS",
    "K8S_COMMANDS",
    "KEEP_RUNNING_ANNOTATION",
    "KUEUE_API",
    "KUEUE_COMPONENTS",
    "KWOK_STAGE_FILES",
    "MANAGER",
    "MANAGER_COMPONENT",
    "MAX_MULTIKUEUE_CLUSTERS",
    "METRICS_READER",
    "METRICS_TOKEN_FILE",
    "MULTIKUEUE_ORIGIN",
    "MULTIKUEUE_USER",
    "OUR_COMPONENTS",
    "PROJECT",
    "REPO",
    "SAMPLE_JOB_FILE",
    "SAMPLE_LWS_FILE",
    "SAMPLE_LWS_TIMEOUT",
    "SETUP_ADMISSION_CHECK",
    "SETUP_CLUSTER_QUEUE",
    "SETUP_LOCAL_QUEUE",
    "SETUP_MULTIKUEUE_CONFIG",
    "SETUP_NAMESPACE",
    "SUPERVISOR",
    "UPSTREAM_KUEUE_COMPONENT",
    "VISIBILITY_GROUP",
    "VISIBILITY_VERSIONS",
    "WEBHOOKS_COMPONENT",
    "Binaries",
    "Builder",
    "CertificateAuthority",
    "ClusterPlan",
    "FleetError",
    "FleetOptions",
    "FleetUp",
    "Kubectl",
    "PortAllocator",
    "State",
    "WorkerSetup",
    "apiservice_available",
    "b64",
    "child_pid",
    "cluster_metrics_token",
    "crd_docs",
    "describe_lws_workloads",
    "down",
    "etcd_prefix",
    "fleet_is_running",
    "fleet_worker",
    "fmt_duration",
    "free_port",
    "go_duration",
    "guide_checks",
    "http_ok",
    "https_ok",
    "kubeconfig",
    "localfleet_command",
    "log",
    "lws_replicas",
    "main",
    "metrics_reader_objects",
    "metrics_reader_token",
    "metrics_summary",
    "multikueue_cluster_name",
    "multikueue_setup_objects",
    "next_steps",
    "pid_alive",
    "pid_is_ours",
    "project_env",
    "project_python",
    "read_metrics",
    "read_versions",
    "rss_mib",
    "runs_pods",
    "sample_lws",
    "sample_lws_manifest",
    "sample_lws_next_steps",
    "sample_lws_placement",
    "setup_multikueue",
    "stop_processes",
    "sum_quantities",
    "supervised_status",
    "tls_port_open",
    "upstream_kueue_clusters",
    "upstream_kueue_config",
    "visibility_api_objects",
    "wait_for",
    "write_file",
]
