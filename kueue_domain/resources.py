"""Kubernetes quantities as exact integers, ResourceList arithmetic, and the Configuration's
`resources` section (`RequestConfig`) that the worker's request computation applies.

The engine counts cpu in millicores and every other resource in integer base units (bytes, pods,
devices), rounding up like Go's `Quantity.MilliValue()` / `Value()`. Formatting back follows
apimachinery's canonical `Quantity.String()` as Kueue's ResourceFormatter uses it: cpu as a DecimalSI
milli quantity, memory / ephemeral-storage / hugepages-* as BinarySI re-parsed, anything else
DecimalSI.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kueue_domain import api

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
HUGEPAGES_PREFIX = "hugepages-"

# (flavor, resource): the key of every quota and usage map.
FlavorResource = tuple[str, str]
# resource name -> integer amount in the engine's units.
ResourceList = dict[str, int]

_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX_BY_EXPONENT = {exp: suffix for suffix, exp in _DECIMAL_SUFFIXES.items()}
_QUANTITY_RE = re.compile(r"^([+-]?)(\d*)(?:\.(\d*))?([a-zA-Z]*|[eE][+-]?\d+)$")


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity string ("500m", "1.5", "10Gi", "1e3", "100M")."""
    if isinstance(text, bool):
        raise QuantityError(f"quantities must match the regular expression: {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        return Fraction(str(text))
    match = _QUANTITY_RE.match(text.strip())
    if not match:
        raise QuantityError(f"quantities must match the regular expression: {text!r}")
    sign, whole, frac, suffix = match.groups()
    if not whole and not frac:
        raise QuantityError(f"quantities must match the regular expression: {text!r}")
    value = Fraction(int(whole or "0"))
    if frac:
        value += Fraction(int(frac), 10 ** len(frac))
    if suffix in _BINARY_SUFFIXES:
        value *= 2 ** _BINARY_SUFFIXES[suffix]
    elif suffix in _DECIMAL_SUFFIXES:
        value *= Fraction(10) ** _DECIMAL_SUFFIXES[suffix]
    elif suffix[:1] in ("e", "E") and len(suffix) > 1:
        value *= Fraction(10) ** int(suffix[1:])
    else:
        raise QuantityError(f"unable to parse quantity's suffix: {text!r}")
    return -value if sign == "-" else value


def to_amount(resource: str, value: Fraction) -> int:
    """Engine units: millicores for cpu, base units otherwise; rounded up like Go."""
    if resource == CPU:
        return math.ceil(value * 1000)
    return math.ceil(value)


# Every Workload event parses its requests and usage again, and a cluster has few distinct
# quantities; typed, so that True is not taken for 1.
@functools.lru_cache(maxsize=4096, typed=True)
def quantity_amount(resource: str, text: str | int | float) -> int:
    """Parse a quantity straight into engine units."""
    return to_amount(resource, parse_quantity(text))


def resource_list_from_api(resources: Mapping[str, str | int | float] | None) -> ResourceList:
    """A corev1.ResourceList dict as engine units."""
    if not resources:
        return {}
    return {name: quantity_amount(name, qty) for name, qty in resources.items()}


def _decimal_canonical(mantissa: int, exponent: int) -> str:
    """apimachinery's DecimalSI canonical form of mantissa * 10**exponent."""
    if mantissa == 0:
        return "0"
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3
    if shift:
        mantissa *= 10**shift
        exponent -= shift
    suffix = _DECIMAL_SUFFIX_BY_EXPONENT.get(exponent)
    if suffix is None:
        suffix = f"e{exponent}"
    return f"{mantissa}{suffix}"


def _binary_canonical(value: int) -> str:
    """BinarySI quantity String() re-parsed, as Kueue's newCanonicalQuantity does."""
    if value == 0:
        return "0"
    if -1024 < value < 1024:
        return _decimal_canonical(value, 0)
    exponent = 0
    mantissa = value
    while mantissa % 1024 == 0 and exponent < 60:
        mantissa //= 1024
        exponent += 10
    if exponent == 0:
        # "1000000" re-parses as DecimalSI and prints as "1M".
        return _decimal_canonical(value, 0)
    suffix = {v: k for k, v in _BINARY_SUFFIXES.items()}[exponent]
    return f"{mantissa}{suffix}"


def uses_binary_format(resource: str) -> bool:
    return resource in (MEMORY, EPHEMERAL_STORAGE) or resource.startswith(HUGEPAGES_PREFIX)


def format_amount(resource: str, amount: int) -> str:
    """The canonical quantity string of an engine amount (what Kueue prints in messages and status)."""
    if resource == CPU:
        return _decimal_canonical(amount, -3)
    if uses_binary_format(resource):
        return _binary_canonical(amount)
    return _decimal_canonical(amount, 0)


def format_fraction(value: Fraction) -> str:
    """DecimalSI canonical form of an exact value with at most nano precision (rounded up)."""
    nanos = math.ceil(value * 10**9)
    return _decimal_canonical(nanos, -9)


# apimachinery's Quantity formats: the suffix a quantity is written with decides how sums print.
DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"


def quantity_format(text: str | int | float) -> str:
    """The Format apimachinery's ParseQuantity gives a quantity: BinarySI for Ki..Ei, DecimalExponent
    for an `e`/`E` exponent, DecimalSI otherwise (no suffix included)."""
    if not isinstance(text, str):
        return DECIMAL_SI
    match = _QUANTITY_RE.match(text.strip())
    suffix = match.group(4) if match else ""
    if suffix in _BINARY_SUFFIXES:
        return BINARY_SI
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return DECIMAL_EXPONENT
    return DECIMAL_SI


def format_quantity(value: Fraction, fmt: str) -> str:
    """apimachinery's `Quantity.String()` of an exact value (at most nano precision, rounded up)
    in format `fmt`: BinarySI below 1024 or with a fraction prints as DecimalSI; a BinarySI integer
    takes the largest power-of-1024 suffix that divides it (none: plain digits)."""
    if value == 0:
        return "0"
    if fmt == BINARY_SI and abs(value) >= 1024 and value.denominator == 1:
        mantissa, exponent = int(value), 0
        while mantissa % 1024 == 0 and exponent < 60:
            mantissa //= 1024
            exponent += 10
        suffix = {v: k for k, v in _BINARY_SUFFIXES.items()}.get(exponent, "")
        return f"{mantissa}{suffix}"
    if fmt == DECIMAL_EXPONENT:
        text = format_fraction(value)
        match = _QUANTITY_RE.match(text)
        assert match is not None
        sign, whole, _frac, suffix = match.groups()
        exponent = _DECIMAL_SUFFIXES[suffix] if suffix in _DECIMAL_SUFFIXES else int(suffix[1:])
        return f"{sign}{whole}" + (f"e{exponent}" if exponent else "")
    return format_fraction(value)


def sum_quantities(texts: Iterable[str | int | float]) -> str:
    """The canonical string of the sum of quantities, as apimachinery's `Quantity.Add` into a zero
    Quantity prints it: the sum takes the format of the summand added while the total was zero."""
    total = Fraction(0)
    fmt = DECIMAL_SI
    for text in texts:
        if total == 0:
            fmt = quantity_format(text)
        total += parse_quantity(text)
    return format_quantity(total, fmt)


def resource_list_to_api(resources: Mapping[str, int]) -> dict[str, str]:
    return {name: format_amount(name, amount) for name, amount in sorted(resources.items())}


# ------------------------------------------------------------------------------------------------
# ResourceList arithmetic (plain dicts, new dicts returned unless the name says in place)


def add(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) + amount
    return out


def add_into(target: dict, b: Mapping) -> None:
    for name, amount in b.items():
        target[name] = target.get(name, 0) + amount


def sub(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) - amount
    return out


def scale(a: Mapping[str, int], factor: int) -> ResourceList:
    return {name: amount * factor for name, amount in a.items()}


def maximum(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    out = dict(a)
    for name, amount in b.items():
        if amount > out.get(name, amount - 1):
            out[name] = amount
    return out


def total(lists: Iterable[Mapping[str, int]]) -> ResourceList:
    out: ResourceList = {}
    for rl in lists:
        add_into(out, rl)
    return out


# ------------------------------------------------------------------------------------------------
# The Configuration's `resources` section


@dataclass(frozen=True)
class Transformation:
    """One `resources.transformations[]` entry of the Configuration."""

    input: str
    outputs: Mapping[str, Fraction]
    strategy: str = api.RESOURCE_TRANSFORMATION_RETAIN
    multiply_by: str | None = None

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Transformation:
        return cls(
            input=obj["input"],
            outputs={k: parse_quantity(v) for k, v in (obj.get("outputs") or {}).items()},
            strategy=obj.get("strategy") or api.RESOURCE_TRANSFORMATION_RETAIN,
            multiply_by=obj.get("multiplyBy") or None,
        )


@dataclass(frozen=True)
class RequestConfig:
    """The parts of the Configuration that change request computation."""

    exclude_resource_prefixes: tuple[str, ...] = ()
    transformations: tuple[Transformation, ...] = ()
    quota_check_strategy: str = api.QUOTA_CHECK_BLOCK_UNDECLARED

    @classmethod
    def from_dict(cls, resources_config: Mapping[str, Any] | None) -> RequestConfig:
        cfg = resources_config or {}
        return cls(
            exclude_resource_prefixes=tuple(cfg.get("excludeResourcePrefixes") or ()),
            transformations=tuple(Transformation.from_dict(t) for t in cfg.get("transformations") or ()),
            quota_check_strategy=cfg.get("quotaCheckStrategy") or api.QUOTA_CHECK_BLOCK_UNDECLARED,
        )
