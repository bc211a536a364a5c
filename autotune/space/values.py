"""The parts of a search space, for every client: parameter, rule and config types, and how
a value is cast, written and mapped to the sampler's fraction of a range."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from autotune import expr
from autotune.errors import ConfigError

#: Spaces up to this many configs can be listed and scored one by one (the GP sampler).
ENUMERABLE_LIMIT = 20_000

Value = int | float | str
Params = dict[str, Value]

FRACTION_SUFFIX = "_frac"


@dataclass(frozen=True)
class CompanionFile:
    """A file the server reads, written next to the unit on the host for each trial."""

    name: str
    """File name in the unit's directory on the host (or an absolute path)."""
    content: str
    """The file's text; `{value}` stands for the parameter's value."""
    builtin: Value | None = None
    """The value that means "no file": the flag is left out and the server's default runs."""

    def path(self, unit_dir: str) -> str:
        return self.name if self.name.startswith("/") else f"{unit_dir.rstrip('/')}/{self.name}"

    def text(self, value: Value) -> str:
        return self.content.replace("{value}", render(value))


@dataclass(frozen=True)
class JsonField:
    """A field of a flag whose value is one JSON object (vLLM's `--speculative-config`):
    every parameter with the same flag sets one field, and the flag carries them all."""

    key: str
    builtin: Value | None = None
    """The value that means "no JSON at all": the whole flag is left out and the server runs
    without it (vLLM's `method: none` is no speculation)."""


@dataclass(frozen=True)
class Param:
    name: str
    flag: str
    """The launch flag it sets ("" for an environment variable)."""
    type: Literal["int", "float", "str", "bool"]
    low: expr.Expr | None = None
    high: expr.Expr | None = None
    choices: tuple[Value, ...] | None = None
    value: expr.Expr | None = None
    log: bool = False
    when: expr.Expr | None = None
    """The parameter applies only where this holds; elsewhere it has no value and no flag."""
    env: str | None = None
    """Set as `Environment=NAME=value` in the unit's [Service] instead of a flag."""
    file: CompanionFile | None = None
    """The value becomes a file on the host; `flag` gets the file's path."""
    json: JsonField | None = None
    """The value is one field of the flag's JSON object."""

    @property
    def label(self) -> str:
        """Where the value goes, for people: the flag, `--flag.key` for a field of a JSON
        flag (vLLM's own spelling of one field), or `Environment=NAME`."""
        if self.json is not None:
            return f"{self.flag}.{self.json.key}"
        return self.flag or f"Environment={self.env}"

    def rendered(self, value: Value) -> str | None:
        """The flag's or variable's value text; None: a bare boolean flag."""
        if self.type == "bool":
            if self.env is not None:
                return "1" if value else "0"
            return None
        return render(value)

    @property
    def depends_on(self) -> frozenset[str]:
        names: set[str] = set()
        for e in (self.low, self.high, self.value, self.when):
            if e is not None:
                names |= e.names
        return frozenset(names)

    @property
    def fixed(self) -> bool:
        return self.value is not None

    @property
    def dependent_range(self) -> bool:
        bounds = (self.low, self.high)
        return not self.fixed and any(e is not None and e.names for e in bounds)

    @property
    def study_name(self) -> str:
        return self.name + FRACTION_SUFFIX if self.dependent_range else self.name


@dataclass(frozen=True)
class Rule:
    why: str
    when: expr.Expr | None = None
    set: Mapping[str, expr.Expr] = field(default_factory=dict)
    require: expr.Expr | None = None


@dataclass(frozen=True)
class Candidate:
    """One distinct configuration the space can propose, after the rules."""

    params: Params
    valid: bool
    reason: str | None = None


@dataclass(frozen=True)
class DraftShape:
    """The draft a config builds, as expressions over its knobs: `steps` drafted tokens in a
    chain, `topk` candidates per step, `draft` tokens verified (the bonus one included)."""

    steps: expr.Expr
    topk: expr.Expr
    draft: expr.Expr

    @property
    def names(self) -> frozenset[str]:
        return self.steps.names | self.topk.names | self.draft.names


# -- mapping a fraction to an integer range ----------------------------------
def from_fraction(u: float, lo: int, hi: int, log: bool) -> int:
    u = min(max(u, 0.0), 1.0)
    if hi <= lo:
        return lo
    if log and lo > 0:
        v = math.floor(math.exp(math.log(lo) + u * (math.log(hi + 1) - math.log(lo))))
    else:
        v = lo + math.floor(u * (hi - lo + 1))
    return min(max(v, lo), hi)


def to_fraction(v: int, lo: int, hi: int, log: bool) -> float:
    if hi <= lo:
        return 0.5
    v = min(max(v, lo), hi)
    if log and lo > 0:
        mid = math.log(math.sqrt(v * (v + 1)))
        return (mid - math.log(lo)) / (math.log(hi + 1) - math.log(lo))
    return (v - lo + 0.5) / (hi - lo + 1)


def cast(p: Param, v: Any) -> Value:
    """`v` as parameter `p`'s type; ValueError/TypeError when it is not one (None included)."""
    if v is None or isinstance(v, (dict, list)):
        raise TypeError(f"{p.name}: no value")
    if p.type in ("int", "float") and isinstance(v, bool):
        raise TypeError(f"{p.name}: {v!r} is not a number")
    return coerce(p, v)


def holds(condition: expr.Expr | None, config: Mapping[str, Value]) -> bool:
    """A rule's `when`: false when it names a parameter that does not apply."""
    if condition is None:
        return True
    return condition.names <= config.keys() and bool(condition(config))


def coerce(p: Param, v: Any) -> Value:
    if p.type == "bool":
        if isinstance(v, str):
            return v.strip().lower() in ("1", "true", "yes", "on")
        return bool(v)
    if p.type == "int":
        if isinstance(v, float) and not v.is_integer():
            raise ValueError(f"{p.name}: {v} is not an integer")
        return int(v)
    if p.type == "float":
        return float(v)
    return str(v)


def json_text(obj: Mapping[str, Any]) -> str:
    """A JSON flag's value as the server's own docs write it: `{"method": "ngram", ...}`."""
    return json.dumps(dict(obj), separators=(", ", ": "))


def render(v: Value) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return repr(v)
    return str(v)


def dependency_order(source: str, params: Mapping[str, Param]) -> list[str]:
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str, chain: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise ConfigError(source, f"params.{name}", "cycle: " + " -> ".join([*chain, name]))
        state[name] = 1
        for dep in sorted(params[name].depends_on):
            visit(dep, [*chain, name])
        state[name] = 2
        order.append(name)

    for name in params:
        visit(name, [])
    return order
