"""The AllAtOnce dispatcher (the default, multikueue-spec §3.5.1): every connected worker gets a
copy, and the first to admit it wins."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from manager.dispatch.base import StatelessDispatcher

Obj = dict[str, Any]


class AllAtOnceDispatcher(StatelessDispatcher):
    every_worker = True

    def nominate(
        self, key: str, current: list[str], everyone: list[str], copies: Mapping[str, Obj | None]
    ) -> tuple[list[str], float | None]:
        return sorted(everyone), None
