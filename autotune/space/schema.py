"""The YAML schema of `search_spaces/*.yaml` and its validator: a space file read, checked
and built, each mistake one line naming the file and the key."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from autotune import expr, yamlfile
from autotune.errors import ConfigError
from autotune.space.search_space import SearchSpace
from autotune.space.values import (
    CompanionFile,
    DraftShape,
    JsonField,
    Param,
    Rule,
)
from autotune.unit.unitfile import ENV_NAME

# -- loading ------------------------------------------------------------------
_PARAM_KEYS = {
    "flag", "type", "low", "high", "choices", "value", "log", "when", "env", "file", "json",
}  # fmt: skip
_JSON_KEYS = {"key", "builtin"}
_FILE_KEYS = {"name", "content", "builtin"}
_RULE_KEYS = {"when", "set", "require", "why"}


def load_space(path: str | Path) -> SearchSpace:
    path = Path(path)
    return space_from_dict(yamlfile.read(path, "search-space file"), str(path))


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
        if not isinstance(env, str) or not ENV_NAME.match(env):
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
