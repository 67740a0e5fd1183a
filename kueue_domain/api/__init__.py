"""Every upstream API string, defined once: Kueue's group and kinds, labels, annotations, finalizers,
condition types, reasons, messages, event reasons, field managers and metric names, by topic:

| module | what |
|---|---|
| `resources` | Kueue's group, version and kinds; LeaderWorkerSet, JobSet, Trainer, ClusterProfile |
| `labels` | labels, annotations and values, finalizers, scheduling gates, framework names |
| `enums` | spec and Configuration enum values |
| `conditions` | ClusterQueue, LocalQueue and Workload condition types, reasons and messages |
| `events` | event reasons and messages, the job reconciler's stop messages, field managers |
| `multikueue` | MultiKueue's names, conditions, messages, events, metrics and defaults |
| `provisioning` | the provisioning-request admission check, its config, the autoscaler's requests |
| `scheduler` | the admission engine's requeue reasons and inadmissible messages |
| `webhooks` | admission webhook names and paths, validation messages |
| `kubeflow` | the training-operator's and MPI Operator's kinds, framework names, conditions, webhook paths |

`from kueue_domain import api` then `api.X` names any of them, and kube_runtime's generic ones too
(`Resource`, Kubernetes' own kinds, condition status values, `go_quote`): one prefix for every string.
Feature gates are in kueue_domain/features.py, v1beta1 <-> v1beta2 conversion in
kueue_domain/conversion.py.
"""

from kube_runtime.constants import *  # noqa: F403
from kube_runtime.gofmt import *  # noqa: F403
from kube_runtime.resources import *  # noqa: F403
from kueue_domain.api.conditions import *  # noqa: F403
from kueue_domain.api.enums import *  # noqa: F403
from kueue_domain.api.events import *  # noqa: F403
from kueue_domain.api.kubeflow import *  # noqa: F403
from kueue_domain.api.labels import *  # noqa: F403
from kueue_domain.api.multikueue import *  # noqa: F403
from kueue_domain.api.provisioning import *  # noqa: F403
from kueue_domain.api.resources import *  # noqa: F403
from kueue_domain.api.scheduler import *  # noqa: F403
from kueue_domain.api.webhooks import *  # noqa: F403
