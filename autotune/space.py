"""Search spaces: `search_spaces/*.yaml` -> Optuna suggestions -> launch-flag values.

A search space is data. Each parameter names the launch flag it sets; its
bounds may depend on other parameters (draft tokens <= steps * topk + 1), and
rules say what the engine itself does to a combination, so that the config a
proposal really becomes is known before anything is deployed.

Encoding for Optuna: multivariate TPE and GP model only parameters whose
distribution is the same in every trial. A parameter with a dependent bound is
therefore suggested as its *position* inside the valid range, a float in
[0, 1] named `<name>_frac`, and mapped to an integer of that range. Every
proposal is then valid by construction and the sampler still models all knobs
jointly. The values a trial really ran are recorded by the study code as the
trial's config; the study parameters are the sampler's coordinates.

A parameter may apply only under a condition (`when: spec_type == 'ngram-mod'`):
where it does not apply it has no value, sets no flag (and is removed from the
unit if there), and is not part of the config's identity, so a knob of one
speculative type neither multiplies the configs of another nor makes two
trials of the same config look different. The sampler still sees its
coordinate in every trial (fixed distributions) and the value is ignored.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from autotune import expr, yamlfile
from autotune.errors import ConfigError

#: Spaces up to this many configs can be listed and scored one by one (the GP sampler).
ENUMERABLE_LIMIT = 20_000

Value = int | float | str
Params = dict[str, Value]

FRACTION_SUFFIX = "_frac"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
        return self.content.replace("{value}", _render(value))


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
        return _render(value)

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


class SearchSpace:
    def __init__(
        self,
        source: str,
        engine: str | None,
        params: list[Param],
        rules: list[Rule],
        memory_grows_with: tuple[str, ...] = (),
        memory_per_request: expr.Expr | None = None,
        draft_shape: DraftShape | None = None,
    ):
        self.source = source
        self.engine = engine
        self.params = {p.name: p for p in params}
        self.rules = rules
        self.memory_grows_with = memory_grows_with
        """Knobs whose every increase costs memory (see the space file's `memory_grows_with`)."""
        self.memory_per_request = memory_per_request
        """KV tokens the engine reserves per running request for a config (the space file's
        `memory_per_request`); the capacity predictor's input (`autotune/search/capacity.py`)."""
        self.draft_shape = draft_shape
        """How a config's knobs shape the draft (the space file's `draft_shape`): the
        performance model's input (`autotune/search/perf/`)."""
        self._enumerated: list[Candidate] | None = None  # a space never changes once parsed
        self.order = _topological_order(source, self.params)

    # -- what the study sees ---------------------------------------------------
    def distributions(self) -> dict[str, BaseDistribution]:
        """The sampler's coordinates: the same distributions in every trial."""
        dists: dict[str, BaseDistribution] = {}
        for name in self.order:
            p = self.params[name]
            if p.fixed:
                continue
            if p.dependent_range:
                dists[p.study_name] = FloatDistribution(0.0, 1.0)
            elif p.choices is not None:
                dists[p.study_name] = CategoricalDistribution(p.choices)
            elif p.type == "int":
                dists[p.study_name] = IntDistribution(
                    int(p.low({})),
                    int(p.high({})),
                    log=p.log,  # type: ignore[misc]
                )
            else:
                dists[p.study_name] = FloatDistribution(
                    float(p.low({})),
                    float(p.high({})),
                    log=p.log,  # type: ignore[misc]
                )
        return dists

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Ask the trial for every coordinate; returns the study params."""
        out: dict[str, Any] = {}
        for name, dist in self.distributions().items():
            if isinstance(dist, CategoricalDistribution):
                out[name] = trial.suggest_categorical(name, dist.choices)
            elif isinstance(dist, IntDistribution):
                out[name] = trial.suggest_int(name, dist.low, dist.high, log=dist.log)
            else:
                assert isinstance(dist, FloatDistribution)
                out[name] = trial.suggest_float(name, dist.low, dist.high, log=dist.log)
        return out

    def applies(self, name: str, config: Mapping[str, Value]) -> bool:
        """Whether parameter `name` has a value in `config` (its `when` holds).

        A condition over a parameter that itself does not apply is false.
        """
        p = self.params[name]
        if p.when is None:
            return True
        if not p.when.names <= config.keys():
            return False
        return bool(p.when(config))

    def complete(self, config: Mapping[str, Value]) -> bool:
        """Every parameter that applies to `config` has a value in it."""
        return all(n in config for n in self.order if self.applies(n, config))

    def decode(self, study_params: Mapping[str, Any]) -> Params:
        """Study params -> the config the engine will run (rules' adjustments applied)."""
        config: Params = {}
        for name in self.order:
            p = self.params[name]
            if not self.applies(name, config):
                continue
            if p.fixed:
                config[name] = _cast(p, p.value(config))  # type: ignore[misc]
            elif p.dependent_range:
                lo, hi = self._bounds(p, config)
                config[name] = _from_fraction(float(study_params[p.study_name]), lo, hi, p.log)
            else:
                config[name] = study_params[p.study_name]
        return self.apply_rules(config)

    def encode(self, config: Mapping[str, Value]) -> dict[str, Any]:
        """A config (e.g. the unit's current flags) -> study params that decode to it."""
        study: dict[str, Any] = {}
        known: Params = {}
        for name in self.order:
            p = self.params[name]
            if not self.applies(name, known):
                continue  # its coordinate is left to the sampler: the value is never used
            if name not in config:
                raise KeyError(name)
            v = _cast(p, config[name])
            known[name] = v
            if p.fixed:
                continue
            if p.dependent_range:
                lo, hi = self._bounds(p, known)
                study[p.study_name] = _to_fraction(int(v), lo, hi, p.log)
            else:
                study[p.study_name] = v
        return study

    def apply_rules(self, config: Params) -> Params:
        out = dict(config)
        for rule in self.rules:
            if rule.set and _holds(rule.when, out):
                for name, e in rule.set.items():
                    if name in out and e.names <= out.keys():
                        out[name] = _cast(self.params[name], e(out))
        return out

    def memory_tokens(self, config: Mapping[str, Value]) -> float | None:
        """`memory_per_request` of a config as the server will run it (rules applied), or
        None when the space does not say or the config lacks a knob it needs."""
        e = self.memory_per_request
        resolved = self.apply_rules(dict(config))
        if e is None or not e.names <= resolved.keys():
            return None
        return float(e(resolved))

    def shape(self, config: Mapping[str, Value]) -> tuple[int, int, int] | None:
        """(steps, topk, draft tokens) of a config as the server will run it, or None when
        the space has no `draft_shape` or the config lacks a knob it needs."""
        d = self.draft_shape
        if d is None:
            return None
        resolved = self.apply_rules(dict(config))
        if not d.names <= resolved.keys():
            return None
        try:
            return int(d.steps(resolved)), int(d.topk(resolved)), int(d.draft(resolved))
        except (TypeError, ValueError, ArithmeticError):
            return None

    def check(self, config: Mapping[str, Value]) -> str | None:
        """Why `config` is not valid for this space, or None."""
        for name in self.order:
            p = self.params[name]
            if not self.applies(name, config):
                continue
            v = config.get(name)
            if v is None:
                return f"{name} is missing"
            if p.choices is not None and v not in p.choices and not p.fixed:
                return f"{name}={v} is not one of {list(p.choices)}"
            if p.low is not None and p.high is not None:
                lo, hi = self._bounds(p, config)
                adjusted = p.name in self._set_by_rules(config)
                if p.dependent_range and not adjusted and not lo <= v <= hi:  # type: ignore[operator]
                    return f"{name}={v} is outside [{lo}, {hi}]"
        for rule in self.rules:
            applies = rule.require is not None and _holds(rule.when, config)
            if applies and rule.require.names <= config.keys() and not rule.require(config):  # type: ignore[union-attr]
                return rule.why
        return None

    def _set_by_rules(self, config: Mapping[str, Value]) -> set[str]:
        names: set[str] = set()
        for rule in self.rules:
            if rule.set and _holds(rule.when, config):
                names |= set(rule.set)
        return names

    def bounds(self, name: str, config: Mapping[str, Value]) -> tuple[int, int]:
        """The integer range of parameter `name` given the values it depends on."""
        return self._bounds(self.params[name], config)

    def _bounds(self, p: Param, config: Mapping[str, Value]) -> tuple[int, int]:
        lo = int(p.low(config))  # type: ignore[misc]
        hi = int(p.high(config))  # type: ignore[misc]
        return lo, max(lo, hi)

    # -- what a person and the simulator see ---------------------------------
    def launch_flags(self) -> dict[str, str]:
        """Every launch flag the space sets -> its (first) parameter (environment variables
        not); the several fields of a JSON flag are one flag."""
        out: dict[str, str] = {}
        for n, p in self.params.items():
            if p.flag:
                out.setdefault(p.flag, n)
        return out

    def flags(self, config: Mapping[str, Value], unit_dir: str = ".") -> dict[str, str | None]:
        """The launch flags `config` sets (parameters that do not apply set none; a bare
        boolean flag maps to None; a companion file's flag to its path in `unit_dir`)."""
        out: dict[str, str | None] = {}
        objects = self.json_objects(config)
        for n in self.order:
            p = self.params[n]
            if p.json is not None:
                if p.flag in objects and p.flag not in out:
                    out[p.flag] = _json_text(objects[p.flag])
                continue
            if n not in config or not p.flag or self._absent(p, config[n]):
                continue
            out[p.flag] = p.file.path(unit_dir) if p.file else p.rendered(config[n])
        return out

    def json_objects(self, config: Mapping[str, Value]) -> dict[str, dict[str, Value]]:
        """Each JSON flag `config` sets -> its object, fields in the space's order. A flag
        whose fields all do not apply, or one of whose fields is its `builtin`, is absent."""
        objects: dict[str, dict[str, Value]] = {}
        off: set[str] = set()
        for n in self.order:
            p = self.params[n]
            if p.json is None or n not in config:
                continue
            if self._absent(p, config[n]):
                off.add(p.flag)
            else:
                objects.setdefault(p.flag, {})[p.json.key] = config[n]
        return {flag: obj for flag, obj in objects.items() if flag not in off}

    def removed_flags(self, config: Mapping[str, Value]) -> list[str]:
        """Flags of parameters that do not apply to `config` (or are off): out of the unit."""
        objects = self.json_objects(config)
        gone: list[str] = []
        for n in self.order:
            p = self.params[n]
            if p.json is not None:
                absent = p.flag not in objects
            else:
                absent = bool(p.flag) and (n not in config or self._absent(p, config[n]))
            if absent and p.flag not in gone:
                gone.append(p.flag)
        return gone

    def describe(self, config: Mapping[str, Value]) -> str:
        """What `config` puts in the unit, for people: `--flag value`, `--switch`,
        `NAME=value` (environment), `--flag <file: value>` (a companion file)."""
        words = []
        objects = self.json_objects(config)
        shown: set[str] = set()
        for n in self.order:
            p = self.params[n]
            if p.json is not None:
                if p.flag in shown or n not in config:
                    continue
                shown.add(p.flag)
                obj = objects.get(p.flag)
                words.append(f"{p.flag} '{_json_text(obj)}'" if obj else f"no {p.flag}")
                continue
            if n not in config or (p.flag and self._absent(p, config[n])):
                continue
            v = config[n]
            if p.env is not None:
                words.append(f"{p.env}={p.rendered(v)}")
            elif p.file is not None:
                words.append(f"{p.flag} <{p.file.name}: {_render(v)}>")
            elif p.rendered(v) is None:
                words.append(p.flag)
            else:
                words.append(f"{p.flag} {p.rendered(v)}")
        return " ".join(words)

    def environment(self, config: Mapping[str, Value]) -> dict[str, str]:
        """`Environment=` variables `config` sets."""
        out: dict[str, str] = {}
        for n in self.order:
            p = self.params[n]
            if p.env is not None and n in config:
                out[p.env] = p.rendered(config[n]) or ""
        return out

    def removed_environment(self, config: Mapping[str, Value]) -> list[str]:
        return [p.env for n, p in self.params.items() if p.env is not None and n not in config]

    def files(self, config: Mapping[str, Value], unit_dir: str) -> dict[str, str | None]:
        """Companion files on the host -> their text for `config` (None: must not exist)."""
        out: dict[str, str | None] = {}
        for n in self.order:
            p = self.params[n]
            if p.file is None:
                continue
            path = p.file.path(unit_dir)
            present = n in config and not self._absent(p, config[n])
            out[path] = p.file.text(config[n]) if present else None
        return out

    def companion_paths(self, unit_dir: str) -> list[str]:
        return [p.file.path(unit_dir) for p in self.params.values() if p.file is not None]

    @staticmethod
    def _absent(p: Param, value: Value) -> bool:
        """A value that puts nothing in the unit: a boolean flag off, a file's builtin."""
        if p.json is not None:
            return p.json.builtin is not None and value == p.json.builtin
        if p.type == "bool" and p.env is None:
            return not value
        return p.file is not None and p.file.builtin is not None and value == p.file.builtin

    def patch_unit(
        self,
        unit_text: str,
        config: Mapping[str, Value],
        source: str | None = None,
        unit_dir: str = ".",
    ) -> str:
        """`unit_text` running `config`: its flags and environment set, those that do not
        apply removed; every other byte unchanged."""
        from autotune.unit import unitenv, unitfile

        flags = self.flags(config, unit_dir)
        json_flags = {p.flag for p in self.params.values() if p.json is not None}
        if json_flags & flags.keys():
            current = unitfile.parse_exec_start(unit_text, source=source).flags()
            for flag in json_flags & flags.keys():
                flags[flag] = self.merged_json(flag, flags[flag], current.get(flag))
        text = unitfile.patch_unit(unit_text, flags, self.removed_flags(config), source=source)
        env, gone = self.environment(config), self.removed_environment(config)
        if env or gone:
            text = unitenv.patch_environment(text, env, gone, source=source)
        return text

    def merged_json(self, flag: str, ours: str | None, theirs: str | None) -> str | None:
        """The JSON flag's value: the space's fields, then the unit's own other fields (a
        draft model's path, say) as the unit has them. A unit value that is not a JSON
        object is replaced whole."""
        try:
            unit_obj = json.loads(theirs) if theirs else None
        except ValueError:
            unit_obj = None
        if ours is None or not isinstance(unit_obj, dict):
            return ours
        owned = {p.json.key for p in self.params.values() if p.json and p.flag == flag}
        fields = json.loads(ours)
        merged = {k: v for k, v in unit_obj.items() if k not in owned or k in fields}
        merged.update(fields)  # the unit's order where it has the field, ours after
        return _json_text(merged)

    def key(self, config: Mapping[str, Value]) -> tuple[tuple[str, Value], ...]:
        """Identity of a config, for recognising one that was measured already."""
        return tuple((n, config[n]) for n in self.order if n in config)

    def enumerate(self) -> list[Candidate]:
        """Every distinct configuration the space can propose, in a stable order."""
        if self._enumerated is None:
            self._enumerated = self._walk_all()
        return list(self._enumerated)

    def _walk_all(self) -> list[Candidate]:
        seen: dict[tuple[tuple[str, Value], ...], Candidate] = {}

        def walk(i: int, config: Params) -> None:
            if i == len(self.order):
                final = self.apply_rules(config)
                k = self.key(final)
                if k not in seen:
                    reason = self.check(final)
                    seen[k] = Candidate(final, reason is None, reason)
                return
            p = self.params[self.order[i]]
            if not self.applies(p.name, config):
                walk(i + 1, config)
                return
            for v in self._values(p, config):
                config[p.name] = v
                walk(i + 1, config)
            config.pop(p.name, None)

        walk(0, {})
        return list(seen.values())

    def _values(self, p: Param, config: Params) -> list[Value]:
        if p.fixed:
            return [_cast(p, p.value(config))]  # type: ignore[misc]
        if p.choices is not None:
            return list(p.choices)
        if p.type != "int":
            raise ConfigError(
                self.source, f"params.{p.name}", "a float range cannot be enumerated; give choices"
            )
        lo, hi = self._bounds(p, config)
        return list(range(lo, hi + 1))

    def size(self) -> int:
        return len(self.enumerate())

    def enumerable(self, limit: int = ENUMERABLE_LIMIT) -> bool:
        """True when every config can be listed (no float range) and there are at most `limit`."""
        for p in self.params.values():
            if p.type == "float" and p.choices is None and not p.fixed:
                return False
        return self.size() <= limit


# -- mapping a fraction to an integer range ----------------------------------
def _from_fraction(u: float, lo: int, hi: int, log: bool) -> int:
    u = min(max(u, 0.0), 1.0)
    if hi <= lo:
        return lo
    if log and lo > 0:
        v = math.floor(math.exp(math.log(lo) + u * (math.log(hi + 1) - math.log(lo))))
    else:
        v = lo + math.floor(u * (hi - lo + 1))
    return min(max(v, lo), hi)


def _to_fraction(v: int, lo: int, hi: int, log: bool) -> float:
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
    return _cast(p, v)


def _holds(condition: expr.Expr | None, config: Mapping[str, Value]) -> bool:
    """A rule's `when`: false when it names a parameter that does not apply."""
    if condition is None:
        return True
    return condition.names <= config.keys() and bool(condition(config))


def _cast(p: Param, v: Any) -> Value:
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


def _json_text(obj: Mapping[str, Any]) -> str:
    """A JSON flag's value as the server's own docs write it: `{"method": "ngram", ...}`."""
    return json.dumps(dict(obj), separators=(", ", ": "))


def _render(v: Value) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return repr(v)
    return str(v)


def _topological_order(source: str, params: Mapping[str, Param]) -> list[str]:
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


# -- loading ------------------------------------------------------------------
_PARAM_KEYS = {
    "flag", "type", "low", "high", "choices", "value", "log", "when", "env", "file", "json",
}  # fmt: skip
_JSON_KEYS = {"key", "builtin"}
_FILE_KEYS = {"name", "content", "builtin"}
_RULE_KEYS = {"when", "set", "require", "why"}


def load_space(path: str | Path) -> SearchSpace:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(str(path), None, "search-space file not found") from None
    except OSError as exc:
        raise ConfigError(str(path), None, f"cannot read: {exc.strerror}") from None
    return space_from_dict(yamlfile.load(text, str(path)), str(path))


def space_from_dict(data: Any, source: str) -> SearchSpace:
    if not isinstance(data, dict):
        raise ConfigError(source, None, "a search space must be a mapping with a 'params' key")
    unknown = set(data) - {
        "engine",
        "params",
        "rules",
        "description",
        "memory_grows_with",
        "memory_per_request",
        "draft_shape",
        "extends",
    }
    if unknown:
        problem = (
            "unknown key (expected params, rules, engine, memory_grows_with, "
            "memory_per_request, draft_shape, extends)"
        )
        raise ConfigError(source, sorted(unknown)[0], problem)
    if "extends" in data:
        data = _extended(data, source)
    raw_params = data.get("params")
    if not isinstance(raw_params, dict) or not raw_params:
        raise ConfigError(source, "params", "must be a non-empty mapping of parameter name -> spec")
    names = set(raw_params)
    params = [_param(source, name, spec, names) for name, spec in raw_params.items()]
    rules_raw = data.get("rules") or []
    if not isinstance(rules_raw, list):
        raise ConfigError(source, "rules", "must be a list")
    _check_json_flags(source, params)
    rules = [_rule(source, i, r, names) for i, r in enumerate(rules_raw)]
    engine = data.get("engine")
    if engine is not None and not isinstance(engine, str):
        raise ConfigError(source, "engine", f"must be a string, got {engine!r}")
    memory = _memory_knobs(source, data.get("memory_grows_with"), params)
    per_request = _memory_per_request(source, data.get("memory_per_request"), names)
    shape = _draft_shape(source, data.get("draft_shape"), names)
    space = SearchSpace(source, engine, params, rules, memory, per_request, shape)
    _smoke_test(space)
    return space


def _extended(data: dict[str, Any], source: str) -> dict[str, Any]:
    """`extends: other.yaml`: the other space's params, rules and engine, with this file's
    params added (or replacing those of the same name) and its rules appended."""
    from autotune import resources

    raw = data["extends"]
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(source, "extends", f"must be a search-space file name, got {raw!r}")
    here = Path(source).parent if Path(source).is_file() else Path.cwd()
    path = here / raw
    if not path.is_file():
        path = resources.search_space(raw) or path
    if not path.is_file():
        raise ConfigError(source, "extends", f"file not found: {raw}")
    base = yamlfile.load(path.read_text(), str(path))
    if not isinstance(base, dict) or "extends" in base:
        raise ConfigError(str(path), None, "an extended space must be a plain space (no extends)")
    merged = {**base, **{k: v for k, v in data.items() if k not in ("extends", "params", "rules")}}
    merged["params"] = {**(base.get("params") or {}), **(data.get("params") or {})}
    merged["rules"] = [*(base.get("rules") or []), *(data.get("rules") or [])]
    return merged


def _memory_knobs(source: str, raw: Any, params: list[Param]) -> tuple[str, ...]:
    if raw is None:
        return ()
    numeric = {p.name for p in params if p.type != "str"}
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        raise ConfigError(source, "memory_grows_with", "must be a list of parameter names")
    for name in raw:
        if name not in numeric:
            problem = f"{name!r} is not a numeric parameter of this space"
            raise ConfigError(source, "memory_grows_with", problem)
    return tuple(raw)


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


def _draft_shape(source: str, raw: Any, names: set[str]) -> DraftShape | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != {"steps", "topk", "draft"}:
        problem = "must map steps, topk and draft to expressions over the parameters"
        raise ConfigError(source, "draft_shape", problem)
    parts = {}
    for key, text in raw.items():
        if not isinstance(text, (str, int)) or isinstance(text, bool):
            raise ConfigError(source, f"draft_shape.{key}", f"must be an expression, got {text!r}")
        try:
            parts[key] = expr.parse(text, names)
        except expr.ExprError as exc:
            raise ConfigError(source, f"draft_shape.{key}", str(exc)) from None
    return DraftShape(parts["steps"], parts["topk"], parts["draft"])


def _memory_per_request(source: str, raw: Any, names: set[str]) -> expr.Expr | None:
    if raw is None:
        return None
    if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
        problem = "must be an expression over the parameters (tokens per running request)"
        raise ConfigError(source, "memory_per_request", problem)
    try:
        return expr.parse(raw, names)
    except expr.ExprError as exc:
        raise ConfigError(source, "memory_per_request", str(exc)) from None


def _param(source: str, name: Any, spec: Any, names: set[str]) -> Param:
    key = f"params.{name}"
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(source, key, "a parameter name must be an identifier (like_this)")
    _check_mapping(source, key, spec, _PARAM_KEYS, "with at least 'flag'")
    env = spec.get("env")
    flag = spec.get("flag")
    if env is not None:
        if flag is not None or "file" in spec:
            raise ConfigError(source, key, "give either 'flag' (with an optional 'file') or 'env'")
        if not isinstance(env, str) or not _ENV_NAME.match(env):
            raise ConfigError(source, f"{key}.env", f"must be a variable name, got {env!r}")
        flag = ""
    elif not isinstance(flag, str) or not flag.startswith("-") or " " in flag:
        example = "--" + name.replace("_", "-")
        raise ConfigError(source, f"{key}.flag", f"must be a launch flag like {example}")
    ptype = spec.get("type", "int")
    if ptype not in ("int", "float", "str", "bool"):
        raise ConfigError(source, f"{key}.type", f"must be int, float, str or bool, not {ptype!r}")
    if ptype == "bool":
        spec = {**spec, "choices": spec.get("choices", [False, True])}
        if not all(isinstance(c, bool) for c in spec["choices"]):
            raise ConfigError(source, f"{key}.choices", "a bool parameter takes true/false")
    companion = _companion(source, key, spec.get("file"), ptype)
    others = names - {name}

    def parse(k: str) -> expr.Expr | None:
        if k not in spec:
            return None
        v = spec[k]
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise ConfigError(source, f"{key}.{k}", f"must be a number or an expression, not {v!r}")
        try:
            return expr.parse(v, others)
        except expr.ExprError as exc:
            raise ConfigError(source, f"{key}.{k}", str(exc)) from None

    low, high, value, when = parse("low"), parse("high"), parse("value"), parse("when")
    choices = spec.get("choices")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(source, f"{key}.log", f"must be true or false, not {log!r}")
    kinds = sum(x is not None for x in (value, choices)) + (low is not None or high is not None)
    if kinds != 1:
        raise ConfigError(source, key, "give exactly one of: low+high, choices, value")
    if (low is None) != (high is None):
        raise ConfigError(source, key, "give both low and high")
    if choices is not None:
        if not isinstance(choices, list) or not choices:
            raise ConfigError(source, f"{key}.choices", "must be a non-empty list")
        ints = all(isinstance(c, int) and not isinstance(c, bool) for c in choices)
        if ptype == "int" and not ints:
            raise ConfigError(source, f"{key}.choices", f"must all be integers, got {choices!r}")
        if len(set(choices)) != len(choices):
            raise ConfigError(source, f"{key}.choices", "has duplicates")
        choices = tuple(choices)
    if low is not None and ptype == "str":
        raise ConfigError(source, key, "a str parameter takes choices or value, not a range")
    if low is not None and high is not None and not (low.names or high.names):
        lo, hi = low({}), high({})
        if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)) or lo > hi:
            raise ConfigError(source, key, f"low ({lo}) must be a number <= high ({hi})")
        if log and lo <= 0:
            raise ConfigError(source, f"{key}.log", "a log range needs low > 0")
    dependent = bool((low is not None and low.names) or (high is not None and high.names))
    if dependent and ptype != "int":
        raise ConfigError(source, key, "a range that depends on other parameters must be int")
    builtin = None if companion is None else companion.builtin
    if builtin is not None and (choices is None or builtin not in choices):
        problem = f"{builtin!r} is not one of the parameter's choices"
        raise ConfigError(source, f"{key}.file.builtin", problem)
    field_ = _json_field(source, key, spec.get("json"), env is not None or companion is not None)
    if (
        field_ is not None
        and field_.builtin is not None
        and (choices is None or field_.builtin not in choices)
    ):
        problem = f"{field_.builtin!r} is not one of the parameter's choices"
        raise ConfigError(source, f"{key}.json.builtin", problem)
    return Param(name, flag, ptype, low, high, choices, value, log, when, env, companion, field_)


def _json_field(source: str, key: str, raw: Any, elsewhere: bool) -> JsonField | None:
    """`json: field_name` or `json: {key: field_name, builtin: value}`."""
    if raw is None:
        return None
    where = f"{key}.json"
    if elsewhere:
        raise ConfigError(source, where, "a JSON field is set on a flag, not with env or file")
    if isinstance(raw, str):
        raw = {"key": raw}
    _check_mapping(source, where, raw, _JSON_KEYS, "with key (the field's name)")
    field_key = raw.get("key")
    if not isinstance(field_key, str) or not field_key.strip():
        raise ConfigError(source, f"{where}.key", f"must be the field's name, got {field_key!r}")
    builtin = raw.get("builtin")
    if isinstance(builtin, (dict, list)):
        problem = f"must be one of the choices, got {builtin!r}"
        raise ConfigError(source, f"{where}.builtin", problem)
    return JsonField(field_key, builtin)


def _check_json_flags(source: str, params: list[Param]) -> None:
    """The parameters of one JSON flag are all JSON fields, each field set by one of them."""
    fields: dict[str, dict[str, str]] = {}
    for p in params:
        if p.json is not None:
            owner = fields.setdefault(p.flag, {}).get(p.json.key)
            if owner is not None:
                problem = f"{p.flag} field {p.json.key!r} is already set by {owner}"
                raise ConfigError(source, f"params.{p.name}.json.key", problem)
            fields[p.flag][p.json.key] = p.name
    for p in params:
        if p.json is None and p.flag in fields:
            problem = f"{p.flag} is a JSON flag here (set by {', '.join(fields[p.flag].values())})"
            raise ConfigError(source, f"params.{p.name}.flag", problem + ": give this one json:")


def _check_mapping(source: str, key: str, raw: Any, allowed: set[str], shape: str) -> None:
    """ConfigError unless `raw` is a mapping whose keys are all in `allowed`."""
    if not isinstance(raw, dict):
        raise ConfigError(source, key, f"must be a mapping {shape}")
    unknown = set(raw) - allowed
    if unknown:
        raise ConfigError(source, f"{key}.{sorted(unknown)[0]}", "unknown key")


def _companion(source: str, key: str, raw: Any, ptype: str) -> CompanionFile | None:
    if raw is None:
        return None
    where = f"{key}.file"
    _check_mapping(source, where, raw, _FILE_KEYS, "with name and content")
    if ptype == "bool":
        raise ConfigError(source, where, "a bool parameter cannot be a file")
    name = raw.get("name")
    if (
        not isinstance(name, str)
        or not name
        or name.endswith("/")
        or (not name.startswith("/") and "/" in name)
        or any(c.isspace() or ord(c) < 32 for c in name)
    ):
        problem = f"must be a file name (next to the unit) or an absolute path, got {name!r}"
        raise ConfigError(source, f"{where}.name", problem)
    content = raw.get("content")
    if not isinstance(content, str) or not content:
        raise ConfigError(
            source, f"{where}.content", "must be the file's text ({value} for the value)"
        )
    builtin = raw.get("builtin")
    if builtin is not None and (
        isinstance(builtin, bool) or not isinstance(builtin, (str, int, float))
    ):
        raise ConfigError(
            source, f"{where}.builtin", f"must be one of the choices, got {builtin!r}"
        )
    return CompanionFile(name, content, builtin)


def _rule(source: str, i: int, raw: Any, names: set[str]) -> Rule:
    key = f"rules[{i}]"
    _check_mapping(source, key, raw, _RULE_KEYS, "with when/set or require")

    def parse(k: str, v: Any) -> expr.Expr:
        try:
            return expr.parse(v, names)
        except expr.ExprError as exc:
            raise ConfigError(source, f"{key}.{k}", str(exc)) from None

    when = parse("when", raw["when"]) if "when" in raw else None
    require = parse("require", raw["require"]) if "require" in raw else None
    sets_raw = raw.get("set") or {}
    if not isinstance(sets_raw, dict):
        raise ConfigError(source, f"{key}.set", "must map parameter names to expressions")
    sets: dict[str, expr.Expr] = {}
    for target, e in sets_raw.items():
        if target not in names:
            raise ConfigError(source, f"{key}.set.{target}", "is not a parameter of this space")
        sets[target] = parse(f"set.{target}", e)
    if not sets and require is None:
        raise ConfigError(source, key, "a rule needs 'set' (with optional 'when') or 'require'")
    why = raw.get("why") or (f"violates {require.source}" if require else f"rule {i}")
    return Rule(str(why), when, sets, require)


def _smoke_test(space: SearchSpace) -> None:
    """Decode the corners of the space once so that a bad expression fails at load time."""
    dists = space.distributions()
    corners: list[list[Any]] = []
    for d in dists.values():
        if isinstance(d, CategoricalDistribution):
            corners.append(list(d.choices))
        elif isinstance(d, IntDistribution):
            corners.append([d.low, d.high])
        else:
            assert isinstance(d, FloatDistribution)
            corners.append([d.low, d.high])
    for combo in itertools.islice(itertools.product(*corners), 256):
        study = dict(zip(dists, combo, strict=True))
        key = "params"
        try:
            config = space.decode(study)
            space.check(config)
            key = "memory_per_request"
            space.memory_tokens(config)
        except ConfigError:
            raise
        except Exception as exc:  # any evaluation error is the file's fault
            raise ConfigError(
                space.source, key, f"cannot evaluate at {study}: {type(exc).__name__}: {exc}"
            ) from None
