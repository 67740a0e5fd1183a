"""Kueue's group and kinds, and the kinds of the job frameworks it integrates (LeaderWorkerSet,
JobSet, Kubeflow Trainer, KubeRay) and of SIG Multicluster's ClusterProfile.
"""

from __future__ import annotations

from kube_runtime.resources import Resource

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"

# Kueue kinds (served as v1beta1).
RESOURCE_FLAVOR = Resource(GROUP, VERSION, "resourceflavors", "ResourceFlavor", False)
CLUSTER_QUEUE = Resource(GROUP, VERSION, "clusterqueues", "ClusterQueue", False)
LOCAL_QUEUE = Resource(GROUP, VERSION, "localqueues", "LocalQueue", True)
COHORT = Resource(GROUP, VERSION, "cohorts", "Cohort", False)
WORKLOAD = Resource(GROUP, VERSION, "workloads", "Workload", True)
WORKLOAD_PRIORITY_CLASS = Resource(GROUP, VERSION, "workloadpriorityclasses", "WorkloadPriorityClass", False)
ADMISSION_CHECK = Resource(GROUP, VERSION, "admissionchecks", "AdmissionCheck", False)
MULTIKUEUE_CONFIG = Resource(GROUP, VERSION, "multikueueconfigs", "MultiKueueConfig", False)
MULTIKUEUE_CLUSTER = Resource(GROUP, VERSION, "multikueueclusters", "MultiKueueCluster", False)
PROVISIONING_REQUEST_CONFIG = Resource(
    GROUP, VERSION, "provisioningrequestconfigs", "ProvisioningRequestConfig", False
)
# MultiKueueConfig read as v1beta2, the only version with `spec.quotaManagement` (v1beta1 drops it).
MULTIKUEUE_CONFIG_V1BETA2 = Resource(GROUP, "v1beta2", "multikueueconfigs", "MultiKueueConfig", False)

# Job frameworks' and SIG Multicluster's kinds.
LEADER_WORKER_SET = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", True)
JOB_SET = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True)
# Kubeflow Trainer v2 (github.com/kubeflow/trainer/v2 pkg/apis/trainer/v1alpha1).
TRAIN_JOB = Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob", True)
TRAINING_RUNTIME = Resource("trainer.kubeflow.org", "v1alpha1", "trainingruntimes", "TrainingRuntime", True)
CLUSTER_TRAINING_RUNTIME = Resource(
    "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "ClusterTrainingRuntime", False
)
# KubeRay (github.com/ray-project/kuberay/ray-operator apis/ray/v1).
RAY_JOB = Resource("ray.io", "v1", "rayjobs", "RayJob", True)
RAY_CLUSTER = Resource("ray.io", "v1", "rayclusters", "RayCluster", True)
RAY_SERVICE = Resource("ray.io", "v1", "rayservices", "RayService", True)
# AppWrapper (github.com/project-codeflare/appwrapper api/v1beta2).
APPWRAPPER = Resource("workload.codeflare.dev", "v1beta2", "appwrappers", "AppWrapper", True)
CLUSTER_PROFILE = Resource("multicluster.x-k8s.io", "v1alpha1", "clusterprofiles", "ClusterProfile", True)

KUEUE_RESOURCES = (
    RESOURCE_FLAVOR,
    CLUSTER_QUEUE,
    LOCAL_QUEUE,
    COHORT,
    WORKLOAD,
    WORKLOAD_PRIORITY_CLASS,
    ADMISSION_CHECK,
    MULTIKUEUE_CONFIG,
    MULTIKUEUE_CLUSTER,
    PROVISIONING_REQUEST_CONFIG,
)

# Names of our CustomResourceDefinitions (`<plural>.<group>`); they convert through the agent's
# /convert webhook.
KUEUE_CRD_NAMES = tuple(f"{r.plural}.{r.group}" for r in KUEUE_RESOURCES)
