"""The `Active` condition of AdmissionChecks whose controller is `kueue.x-k8s.io/multikueue`
(multikueue-spec §3.3): resolve the MultiKueueConfig and report missing or inactive clusters."""

from __future__ import annotations

from typing import Any

from kube_runtime.client import KubeClient
from kube_runtime.clock import Clock
from kube_runtime.conditions import is_status_condition_true
from kube_runtime.informer import Informer
from kueue_domain import api
from manager.status import write_active

Obj = dict[str, Any]


class ParametersError(Exception):
    pass


def is_multikueue_check(check: Obj | None) -> bool:
    return ((check or {}).get("spec") or {}).get("controllerName") == api.MULTIKUEUE_CONTROLLER_NAME


def config_name(check: Obj) -> str:
    """The MultiKueueConfig a check names; ParametersError with upstream's text when it is unusable."""
    params = (check.get("spec") or {}).get("parameters")
    if not params:
        raise ParametersError(api.ERR_MISSING_PARAMETERS_REF)
    if params.get("apiGroup") != api.GROUP:
        raise ParametersError(api.err_wrong_parameters_group(params.get("apiGroup") or ""))
    if params.get("kind") != api.MULTIKUEUE_CONFIG.kind:
        raise ParametersError(api.err_wrong_parameters_kind(params.get("kind") or ""))
    if not params.get("name"):
        raise ParametersError(api.ERR_EMPTY_PARAMETERS_NAME)
    return params["name"]


def config_name_or_empty(check: Obj) -> str:
    try:
        return config_name(check)
    except ParametersError:
        return ""


class AdmissionCheckController:
    def __init__(
        self, kube: KubeClient, checks: Informer, configs: Informer, clusters: Informer, clock: Clock
    ) -> None:
        self.kube = kube
        self.checks = checks
        self.configs = configs
        self.clusters = clusters
        self.clock = clock

    def config_clusters(self, check: Obj) -> list[str] | None:
        """The cluster names of the check's MultiKueueConfig, or None when it cannot be resolved."""
        name = config_name_or_empty(check)
        config = self.configs.get(name) if name else None
        return list((config.get("spec") or {}).get("clusters") or ()) if config else None

    async def reconcile(self, name: str) -> None:
        check = self.checks.get(name)
        if check is None or not is_multikueue_check(check):
            return
        try:
            cfg_name = config_name(check)
            config = self.configs.get(cfg_name)
            if config is None:
                raise ParametersError(api.err_multikueue_config_not_found(cfg_name))
        except ParametersError as exc:
            await self._write(check, "False", api.AC_REASON_BAD_CONFIG, api.ac_bad_config_message(str(exc)))
            return
        missing, inactive = [], []
        for cluster_name in (config.get("spec") or {}).get("clusters") or ():
            cluster = self.clusters.get(cluster_name)
            if cluster is None:
                missing.append(cluster_name)
            elif not is_status_condition_true((cluster.get("status") or {}).get("conditions"), "Active"):
                inactive.append(cluster_name)
        unusable = len(missing) + len(inactive)
        total = len((config.get("spec") or {}).get("clusters") or ())
        if unusable == 0:
            await self._write(check, "True", api.AC_REASON_ACTIVE, api.AC_MSG_ACTIVE)
        elif unusable < total:
            await self._write(
                check, "True", api.AC_REASON_SOME_ACTIVE_CLUSTERS, api.ac_clusters_message(missing, inactive)
            )
        else:
            await self._write(
                check, "False", api.AC_REASON_NO_USABLE_CLUSTERS, api.ac_clusters_message(missing, inactive)
            )

    async def _write(self, check: Obj, status: str, reason: str, message: str) -> None:
        await write_active(self.kube, api.ADMISSION_CHECK, check, status, reason, message, self.clock)

    # -- what triggers a reconcile -----------------------------------------------------------

    def checks_for_config(self, config_name_: str) -> list[str]:
        return [
            c["metadata"]["name"]
            for c in self.checks.list()
            if is_multikueue_check(c) and config_name_or_empty(c) == config_name_
        ]

    def checks_for_cluster(self, cluster_name: str) -> list[str]:
        names: list[str] = []
        for config in self.configs.list():
            if cluster_name in ((config.get("spec") or {}).get("clusters") or ()):
                names.extend(self.checks_for_config(config["metadata"]["name"]))
        return names
