"""AppWrapper (workload.codeflare.dev/v1beta2) webhooks: upstream's BaseWebhook, the job framework's
defaulting (default LocalQueue, WorkloadPriorityClass, `spec.suspend: true`, managedBy
`kueue.x-k8s.io/multikueue` over unset or the AppWrapper controller's own value when the LocalQueue
feeds a MultiKueue ClusterQueue) on create and its validation (queue name, prebuilt Workload name,
maximum execution time; on update the rules that depend on the AppWrapper being suspended).

The AppWrapper project's own webhook (its components' checks and the user labels) is separate,
served by its controller where it runs with webhooks on.
"""

from __future__ import annotations

from kueue_domain import api
from worker_agent.webhooks.jobframework import JobWebhook

WEBHOOK = JobWebhook(api.APPWRAPPER.gvk, api.APPWRAPPER_MANAGED_BY_DEFAULT)
default = WEBHOOK.default
