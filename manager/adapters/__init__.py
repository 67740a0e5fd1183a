"""Adapters per job kind, keyed by Go's GVK string (`batch/v1, Kind=Job`), as upstream keys them."""

from __future__ import annotations

from manager.adapters.base import Adapter, OwnershipError, check_ownership, delete_if_owned
from manager.adapters.job import JobAdapter

__all__ = ["Adapter", "JobAdapter", "OwnershipError", "check_ownership", "delete_if_owned"]
