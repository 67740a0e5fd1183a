"""The cluster-autoscaler stand-in: a fleet component that answers ProvisioningRequests
(`autoscaling.x-k8s.io/v1`) as cluster-autoscaler's ProvisioningRequest processing would, since a
fleet has no cloud and no autoscaler.

It watches every ProvisioningRequest of a cluster and writes its status conditions with the
autoscaler's reasons and messages: first `Accepted=True`, then, per the outcome chosen,
`Provisioned=True` (`Provisioned`, the default), `Failed=True` (`Failed`), or `Provisioned=True`
followed by `BookingExpired=True` or `CapacityRevoked=True` (`BookingExpired`, `CapacityRevoked`).
No node is created: what the provisioning-request admission check does with the answer is what is
tested (docs/provisioning-request.md).

    python -m localfleet.autoscaler_standin --kubeconfig FILE [--outcome Failed] [--message TEXT]

Tests run `AutoscalerStandIn` in their own event loop, with an outcome per request if they like.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
from collections.abc import Callable
from typing import Any

from kube_runtime.client import Conflict, KubeClient, NotFound
from kube_runtime.clock import Clock
from kube_runtime.conditions import find_status_condition, parse_time, set_status_condition
from kube_runtime.controller import Controller, Result
from kube_runtime.informer import Informer, object_key
from kueue_domain import api

Obj = dict[str, Any]
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"
OUTCOMES = (PROVISIONED, FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED)

# cluster-autoscaler's reasons and messages (its provisioningrequest/conditions package).
ACCEPTED = ("Accepted", "ProvisioningRequest is accepted by ClusterAutoscaler")
CAPACITY_IS_PROVISIONED = ("CapacityIsProvisioned", "Capacity is found in the cluster")
FAILED_TO_BOOK_CAPACITY = "FailedToBookCapacity"
RESERVATION_EXPIRED = ("CapacityReservationTimeExpired", "Capacity reservation time is expired")
# The autoscaler names no reason for this one; ours.
REVOKED = ("CapacityRevoked", "Capacity was revoked: the provisioned nodes are gone")
DEFAULT_FAILURE_MESSAGE = "Failed to book capacity: the stand-in was told to fail this request"


class AutoscalerStandIn:
    """`outcome`: one of OUTCOMES, or a function of the request giving one. `after`: seconds between
    Provisioned and BookingExpired or CapacityRevoked."""

    def __init__(
        self,
        kube: KubeClient,
        outcome: str | Callable[[Obj], str] = PROVISIONED,
        *,
        failure_message: str = DEFAULT_FAILURE_MESSAGE,
        after: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        self.kube = kube
        self.outcome = outcome
        self.failure_message = failure_message
        self.after = after
        self.clock = clock or Clock()
        self.informer = Informer(kube, api.PROVISIONING_REQUEST, name="standin-provisioningrequests")
        self.controller = Controller("autoscaler-standin", self.reconcile, clock=self.clock)
        enqueue = lambda obj, *rest: self.controller.enqueue(object_key(rest[-1] if rest else obj))  # noqa: E731
        self.informer.add_handler(on_add=enqueue, on_update=enqueue)
        self.answered: list[str] = []  # "<ns>/<name> <condition>", in order

    async def start(self) -> None:
        self.informer.start()
        await self.informer.wait_synced()
        self.controller.start()

    async def stop(self) -> None:
        await self.controller.stop()
        await self.informer.stop()

    def _outcome(self, pr: Obj) -> str:
        outcome = self.outcome(pr) if callable(self.outcome) else self.outcome
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}: one of {', '.join(OUTCOMES)}")
        return outcome

    async def reconcile(self, key: str) -> Result | None:
        pr = self.informer.get(key)
        if pr is None or pr["metadata"].get("deletionTimestamp"):
            return None
        conditions = (pr.get("status") or {}).get("conditions") or []

        def true(ctype: str) -> bool:
            c = find_status_condition(conditions, ctype)
            return c is not None and c.get("status") == "True"

        outcome = self._outcome(pr)
        if not true(api.PR_ACCEPTED):
            return await self._write(pr, api.PR_ACCEPTED, *ACCEPTED)
        if outcome == FAILED:
            if not true(api.PR_FAILED):
                return await self._write(pr, api.PR_FAILED, FAILED_TO_BOOK_CAPACITY, self.failure_message)
            return None
        if not true(api.PR_PROVISIONED):
            return await self._write(pr, api.PR_PROVISIONED, *CAPACITY_IS_PROVISIONED)
        follow_up = {
            BOOKING_EXPIRED: (api.PR_BOOKING_EXPIRED, RESERVATION_EXPIRED),
            CAPACITY_REVOKED: (api.PR_CAPACITY_REVOKED, REVOKED),
        }
        if outcome in follow_up:
            ctype, (reason, message) = follow_up[outcome]
            if true(ctype):
                return None
            provisioned = find_status_condition(conditions, api.PR_PROVISIONED) or {}
            waited = _seconds_since(provisioned.get("lastTransitionTime"), self.clock)
            if waited < self.after:
                return Result(requeue_after=self.after - waited)
            return await self._write(pr, ctype, reason, message)
        return None

    async def _write(self, pr: Obj, ctype: str, reason: str, message: str) -> Result | None:
        updated = copy.deepcopy(pr)
        conditions = updated.setdefault("status", {}).setdefault("conditions", [])
        condition = {
            "type": ctype,
            "status": "True",
            "reason": reason,
            "message": message,
            "observedGeneration": int(pr["metadata"].get("generation") or 0),
        }
        set_status_condition(conditions, condition, self.clock.now())
        try:
            await self.kube.replace_status(api.PROVISIONING_REQUEST, updated)
        except NotFound:
            return None
        except Conflict:
            return Result(requeue=True)
        self.answered.append(f"{object_key(pr)} {ctype}")
        return None


def _seconds_since(timestamp: str | None, clock: Clock) -> float:
    if not timestamp:
        return 0.0
    return (clock.now() - parse_time(timestamp)).total_seconds()


async def _main(args: argparse.Namespace) -> None:
    async with await KubeClient.from_kubeconfig_file(args.kubeconfig) as kube:
        standin = AutoscalerStandIn(kube, args.outcome, failure_message=args.message, after=args.after)
        await standin.start()
        try:
            await asyncio.Event().wait()
        finally:
            await standin.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--outcome", choices=OUTCOMES, default=PROVISIONED)
    parser.add_argument("--message", default=DEFAULT_FAILURE_MESSAGE, help="the Failed condition's message")
    parser.add_argument(
        "--after", type=float, default=1.0, help="seconds before BookingExpired/CapacityRevoked"
    )
    args = parser.parse_args(argv)
    try:
        asyncio.run(_main(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
