"""Kueue's labels, annotations and their values, finalizers and pod scheduling gates, and the keys
and names of the job frameworks it integrates (LeaderWorkerSet, JobSet, Kubeflow Trainer).

Strings are copied byte for byte from upstream Kueue (kubernetes-sigs/kueue ff69552e, the v0.19
line); other Kueue components and users' tooling match on them.
"""

from __future__ import annotations

from kube_runtime.constants import (
    LABEL_BATCH_CONTROLLER_UID,
    LABEL_CONTROLLER_UID_LEGACY,
    LABEL_JOB_NAME_LEGACY,
)

LABEL_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
LABEL_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
LABEL_MAX_EXEC_TIME_SECONDS = "kueue.x-k8s.io/max-exec-time-seconds"
# Written as an annotation (WorkloadIdentifierAnnotations, default) and read from the label too.
LABEL_PREBUILT_WORKLOAD_NAME = "kueue.x-k8s.io/prebuilt-workload-name"
ANNOTATION_PREBUILT_WORKLOAD_NAME = LABEL_PREBUILT_WORKLOAD_NAME
LABEL_JOB_UID = "kueue.x-k8s.io/job-uid"
ANNOTATION_ADMISSION_GATED_BY = "kueue.x-k8s.io/admission-gated-by"
ANNOTATION_ELASTIC_JOB = "kueue.x-k8s.io/elastic-job"
ANNOTATION_WORKLOAD_SLICE_REPLACEMENT_FOR = "kueue.x-k8s.io/workload-slice-replacement-for"
ANNOTATION_JOB_MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
ANNOTATION_JOB_COMPLETIONS_EQUAL_PARALLELISM = "kueue.x-k8s.io/job-completions-equal-parallelism"
ANNOTATION_STOPPING = "kueue.x-k8s.io/stopping"
ANNOTATION_PRIORITY_BOOST = "kueue.x-k8s.io/priority-boost"
LABEL_MANAGED = "kueue.x-k8s.io/managed"
LABEL_PODSET = "kueue.x-k8s.io/podset"
LABEL_LOCAL_QUEUE_NAME = "kueue.x-k8s.io/local-queue-name"
LABEL_CLUSTER_QUEUE_NAME = "kueue.x-k8s.io/cluster-queue-name"
# Annotation by default, label when WorkloadIdentifierAnnotations is off; readers accept both.
ANNOTATION_POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
LABEL_POD_GROUP_NAME = ANNOTATION_POD_GROUP_NAME
ANNOTATION_POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
ANNOTATION_POD_GROUP_FAST_ADMISSION = "kueue.x-k8s.io/pod-group-fast-admission"
ANNOTATION_POD_GROUP_SERVING = "kueue.x-k8s.io/pod-group-serving"
ANNOTATION_ROLE_HASH = "kueue.x-k8s.io/role-hash"
ANNOTATION_RETRIABLE_IN_GROUP = "kueue.x-k8s.io/retriable-in-group"
ANNOTATION_IS_GROUP_WORKLOAD = "kueue.x-k8s.io/is-group-workload"
ANNOTATION_POD_SUSPENDING_PARENT = "kueue.x-k8s.io/pod-suspending-parent"
ANNOTATION_JOB_OWNER_GVK = "kueue.x-k8s.io/job-owner-gvk"
ANNOTATION_JOB_OWNER_NAME = "kueue.x-k8s.io/job-owner-name"
ANNOTATION_COMPONENT_WORKLOAD_INDEX = "kueue.x-k8s.io/component-workload-index"
ANNOTATION_WORKLOAD = "kueue.x-k8s.io/workload"  # TAS: the Workload name on pods
ANNOTATION_POD_INDEX_OFFSET = "kueue.x-k8s.io/pod-index-offset"
ANNOTATION_POD_GROUP_POD_INDEX_LABEL = "kueue.x-k8s.io/pod-group-pod-index-label"
LABEL_POD_GROUP_POD_INDEX = "kueue.x-k8s.io/pod-group-pod-index"
ANNOTATION_PROVREQ_PREFIX = "provreq.kueue.x-k8s.io/"  # job annotations copied onto the Workload

# Values of the keys above.
VALUE_TRUE = "true"
VALUE_FALSE = "false"
ROLE_LEADER = "leader"
ROLE_WORKER = "worker"
ROLE_MAIN = "main"
DEFAULT_PODSET_NAME = ROLE_MAIN
POD_INDEX_OFFSET_WITH_LEADER = "1"
DEFAULT_NAME = "default"  # the default LocalQueue of a namespace and the default WorkloadPriorityClass
UNKNOWN_JOB_UID = "UNKNOWN"

# LeaderWorkerSet's own keys (set by the LWS controller, read by us).
LWS_KEY_PREFIX = "leaderworkerset.sigs.k8s.io"
LWS_LABEL_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_LABEL_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_LABEL_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_ANNOTATION_LEADER_NAME = "leaderworkerset.sigs.k8s.io/leader-name"

# Go GroupVersionKind strings written into ANNOTATION_JOB_OWNER_GVK and used as adapter keys.
JOB_OWNER_GVK_LEADER_WORKER_SET = "leaderworkerset.x-k8s.io/v1, Kind=LeaderWorkerSet"
JOB_OWNER_GVK_STATEFUL_SET = "apps/v1, Kind=StatefulSet"

# Integration (framework) names: Configuration.integrations.frameworks and the suspending-parent value.
FRAMEWORK_BATCH_JOB = "batch/job"
FRAMEWORK_POD = "pod"
FRAMEWORK_DEPLOYMENT = "deployment"
FRAMEWORK_STATEFULSET = "statefulset"
FRAMEWORK_LEADER_WORKER_SET = "leaderworkerset.x-k8s.io/leaderworkerset"
POD_SUSPENDING_PARENT_LEADER_WORKER_SET = FRAMEWORK_LEADER_WORKER_SET
FRAMEWORK_JOB_SET = "jobset.x-k8s.io/jobset"

# JobSet (sigs.k8s.io/jobset api/jobset/v1alpha2): its controller's managedBy value, condition types.
JOB_SET_MANAGED_BY_DEFAULT = "jobset.sigs.k8s.io/jobset-controller"
JOB_SET_CONDITION_COMPLETED = "Completed"
JOB_SET_CONDITION_FAILED = "Failed"
JOB_SET_LABEL_NAME = "jobset.sigs.k8s.io/jobset-name"
FRAMEWORK_TRAIN_JOB = "trainer.kubeflow.org/trainjob"
FRAMEWORK_RAY_JOB = "ray.io/rayjob"
FRAMEWORK_RAY_CLUSTER = "ray.io/raycluster"
FRAMEWORK_RAY_SERVICE = "ray.io/rayservice"
FRAMEWORK_APPWRAPPER = "workload.codeflare.dev/appwrapper"

# AppWrapper (project-codeflare/appwrapper api/v1beta2): its controller's managedBy value, the label
# it puts on the resources it deploys and their pods, its phases and condition types.
APPWRAPPER_MANAGED_BY_DEFAULT = "workload.codeflare.dev/appwrapper-controller"
APPWRAPPER_LABEL = "workload.codeflare.dev/appwrapper"
APPWRAPPER_PHASE_SUCCEEDED = "Succeeded"
APPWRAPPER_PHASE_FAILED = "Failed"
APPWRAPPER_CONDITION_QUOTA_RESERVED = "QuotaReserved"
APPWRAPPER_CONDITION_RESOURCES_DEPLOYED = "ResourcesDeployed"
APPWRAPPER_CONDITION_PODS_READY = "PodsReady"
# Finished's messages (appwrapper_controller.go Finished).
MSG_APPWRAPPER_SUCCEEDED = "AppWrapper finished successfully"
MSG_APPWRAPPER_FAILED = "AppWrapper failed"

# TrainJob (Kubeflow Trainer v2): its controller's managedBy value, condition types, the label naming a
# runtime's replicated Job's role and the trainer container's name (pkg/constants), and the manager
# name of the runtime patch Kueue writes podset info into (upstream's runtimePatchManagerName).
TRAIN_JOB_MANAGED_BY_DEFAULT = "trainer.kubeflow.org/trainjob-controller"
TRAIN_JOB_CONDITION_COMPLETE = "Complete"
TRAIN_JOB_CONDITION_FAILED = "Failed"
TRAIN_JOB_LABEL_ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAIN_JOB_ANCESTOR_TRAINER = "trainer"
TRAIN_JOB_ANCESTOR_DATASET_INITIALIZER = "dataset-initializer"
TRAIN_JOB_ANCESTOR_MODEL_INITIALIZER = "model-initializer"
TRAIN_JOB_CONTAINER_NODE = "node"
TRAIN_JOB_RUNTIME_PATCH_MANAGER = "kueue.x-k8s.io/manager"

# v1beta1 Workload spec.priorityClassSource values.
PRIORITY_CLASS_SOURCE_WORKLOAD = "kueue.x-k8s.io/workloadpriorityclass"
PRIORITY_CLASS_SOURCE_POD = "scheduling.k8s.io/priorityclass"

# The Job controller's labels left out of a Workload's PodSet template (`batch.kubernetes.io/job-name`
# is kept); they must survive a template restore.
JOB_TEMPLATE_LEGACY_LABELS = (LABEL_JOB_NAME_LEGACY, LABEL_CONTROLLER_UID_LEGACY, LABEL_BATCH_CONTROLLER_UID)

# =============================================================================================
# Finalizers and pod scheduling gates

FINALIZER_RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
FINALIZER_MANAGED = LABEL_MANAGED  # pods: the same string as the managed label

SCHEDULING_GATE_ADMISSION = "kueue.x-k8s.io/admission"
SCHEDULING_GATE_TOPOLOGY = "kueue.x-k8s.io/topology"
SCHEDULING_GATE_ELASTIC_JOB = ANNOTATION_ELASTIC_JOB
