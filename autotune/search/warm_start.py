"""`autotune start --from STUDY`: an earlier study's trials, read as evidence for a new one.

The same world, checked before anything is deployed (each refusal one line, exit 2):
- the earlier study exists, is not this study, and none of its workers is running (its
  trials would change under the new study's feet);
- it tuned the same engine over the same space: every knob with its flag, type, values and
  condition. Another space asks another question; what the earlier study measured does not
  answer it.

What may differ, and is written on the new study (`records.STUDY_WARM_START`) so that
`status`, `best` and the report say it: the workload, the levels, the objective, the
unit's other flags (model path, draft model, parallelism, memory), and what the servers
said of themselves (version, KV tokens, running requests), per config measured in both.

Each study records its own world when it is opened (`records.STUDY_WORLD`, `world`); a
study made before that record existed is known by its settings alone (engine, space file).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import Config
from autotune.errors import AutotuneError, ConfigError
from autotune.search import records, workers
from autotune.search.records import config_of
from autotune.space.search_space import SearchSpace
from autotune.store import storage
from autotune.unit import secrets, unitfile

#: The disagreement an earlier measurement is assumed to carry before any config was measured
#: in both studies (log sd): a few times a restart's own 1-2 %.
PRIOR_DISAGREEMENT = 0.05
#: What each trial of the earlier study is read for (the evidence), per measured config.
SERVER_FIELDS = (records.SERVER_VERSION, records.MAX_TOTAL_NUM_TOKENS, records.MAX_RUNNING_REQUESTS)
#: The server's own figures at one config that tell another machine (or another memory
#: setting), and how far they may differ: a restart's memory profiling moves them by well
#: under a percent.
POOL_FIELDS = (records.MAX_TOTAL_NUM_TOKENS, records.MAX_RUNNING_REQUESTS)
SAME_POOL = 0.03


def _refused(name: str, problem: str) -> ConfigError:
    """One line, exit 2: `--from NAME: problem`."""
    return ConfigError(None, f"--from {name}", problem)


def space_identity(space: SearchSpace) -> dict[str, dict[str, Any]]:
    """Every knob as the space defines it: what makes two spaces the same question."""

    def text(e: Any) -> str | None:
        return None if e is None else e.source

    return {
        p.name: {
            "where": p.label,
            "type": p.type,
            "choices": None if p.choices is None else list(p.choices),
            "low": text(p.low),
            "high": text(p.high),
            "value": text(p.value),
            "log": p.log,
            "when": text(p.when),
        }
        for p in space.params.values()
    }


def world(cfg: Config) -> dict[str, Any]:
    """What a study's measurements depend on besides the config: written on every study."""
    return {
        "engine": cfg.target.engine,
        "space": space_identity(cfg.space),
        "unit_flags": unit_flags(cfg),
        "workload": cfg.benchmark.workload,
        "levels": list(cfg.benchmark.concurrency),
        "objective": {
            "mode": cfg.objective.mode,
            "level": cfg.objective.level,
            "rate": cfg.objective.rate,
        },
    }


def unit_flags(cfg: Config) -> dict[str, str | None] | None:
    """The unit's flags that are not knobs of the space (model, draft model, parallelism):
    None when the unit file cannot be read here."""
    if cfg.target.deploy != "local-process":
        return None  # the unit that runs is the host's, not a file here
    try:
        text = Path(cfg.target.unit_file).read_text()
        flags = unitfile.flags(unitfile.parse_exec_start(text).argv)
    except (OSError, ValueError, AutotuneError):
        return None
    knobs = {p.flag for p in cfg.space.params.values() if p.flag}
    # The unit may carry the server's key (`--api-key KEY`): a study record never holds it.
    return secrets.flags({k: v for k, v in flags.items() if k not in knobs})


@dataclass(frozen=True)
class Measured:
    """One config the earlier study measured (its latest feasible measurement)."""

    trial: int
    config: dict[str, Any]
    value: float
    ci: float | None
    """Relative 95 % half-width of the value (`records.VALUE_CI`), where the trial has one."""
    server: dict[str, Any]


@dataclass(frozen=True)
class Earlier:
    name: str
    storage: str
    """Redacted: the record is shown by `status` and kept in the new study."""
    measured: tuple[Measured, ...]
    best: Measured | None
    """What the earlier study declared best (its model's pick, as `autotune best` names it)."""
    differences: dict[str, dict[str, Any]]
    """Field -> {"earlier", "now"}: what differs between the two worlds."""

    def record(self) -> dict[str, Any]:
        return {
            "from": self.name,
            "storage": self.storage,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "best": None if self.best is None else _measured(self.best),
            "differences": self.differences,
            "measured": [_measured(m) for m in self.measured],
        }


def _measured(m: Measured) -> dict[str, Any]:
    return {"trial": m.trial, "config": m.config, "value": m.value, "ci": m.ci, "server": m.server}


def checked(cfg: Config, name: str, storage_url: str | None = None) -> tuple[optuna.Study, str]:
    """The earlier study and its redacted storage, checked: one `ConfigError` line (exit 2)
    for each refusal."""
    url = storage_url or cfg.study.storage
    where = storage.redact(url)
    if name == cfg.study.name and storage.expand(url, cfg.source) == storage.expand(
        cfg.study.storage, cfg.source
    ):
        raise _refused(
            name,
            "that is this study itself; give the earlier study's name "
            "(and study.name or --study a new one)",
        )
    try:
        db = storage.open_storage(url, source=cfg.source, create=False)
        study = optuna.load_study(study_name=name, storage=db)
    except KeyError:
        names = sorted(optuna.get_all_study_names(db))
        known = f" (it holds: {', '.join(names)})" if names else " (it holds no study)"
        raise _refused(name, f"no study named {name!r} in {where}{known}") from None
    except AutotuneError as exc:  # no database there, or not one autotune can open
        raise _refused(name, str(exc)) from None
    except storage.DATABASE_ERRORS as exc:
        raise _refused(name, f"{where} is not a study database ({type(exc).__name__})") from None
    _refuse_other_world(cfg, name, study)
    alive = [w for w in workers.liveness(study, cfg) if not w.stale]
    if alive:
        raise _refused(
            name,
            f"a worker of that study is still running ({alive[0].sentence()}); "
            "wait for it to finish, or stop it first",
        )
    return study, where


def of_study(cfg: Config, study: optuna.Study, where: str, declared: FrozenTrial | None) -> Earlier:
    """What a study (checked, or in memory) gives the next one as evidence; `declared` is
    its declared best (`study.best_trials`)."""
    measured = _measured_configs(study)
    best = None
    if declared is not None:
        best = next((m for m in measured if m.config == config_of(declared)), None)
    return Earlier(study.study_name, where, tuple(measured), best, differences(cfg, study))


def _refuse_other_world(cfg: Config, name: str, study: optuna.Study) -> None:
    earlier = study.user_attrs.get(records.STUDY_WORLD)
    settings = study.user_attrs.get(records.STUDY_CONFIG) or {}
    engine = (earlier or {}).get("engine") or (settings.get("target") or {}).get("engine")
    if engine != cfg.target.engine:
        raise _refused(
            name,
            f"that study tuned {engine or 'an unknown engine'}, this config "
            f"tunes {cfg.target.engine}: a warm start needs the same engine",
        )
    if earlier is not None:
        if earlier.get("space") != space_identity(cfg.space):
            what = _space_difference(earlier.get("space") or {}, space_identity(cfg.space))
            raise _refused(
                name,
                f"that study searched another space ({what}): a warm start "
                "needs the same knobs and values",
            )
        return
    # A study from before the world record: its space is known by its file's name alone.
    then, now = settings.get("search_space"), cfg.space_source
    if then is None or Path(str(then)).name != Path(str(now)).name:
        raise _refused(
            name,
            f"that study searched {then or 'an unrecorded space'}, this config "
            f"searches {now}: a warm start needs the same space",
        )


def _space_difference(then: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    gone, new = sorted(set(then) - set(now)), sorted(set(now) - set(then))
    if gone or new:
        parts = ([f"knobs only there: {', '.join(gone)}"] if gone else []) + (
            [f"knobs only here: {', '.join(new)}"] if new else []
        )
        return "; ".join(parts)
    changed = sorted(k for k in now if then[k] != now[k])
    return f"{', '.join(changed)} defined differently"


def _measured_configs(study: optuna.Study) -> list[Measured]:
    latest: dict[tuple[tuple[str, Any], ...], Measured] = {}
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        feasible = t.state == TrialState.COMPLETE and all(v <= 0 for v in t.constraints.values())
        if not feasible or t.user_attrs.get(records.REUSED_FROM) is not None:
            continue
        config = config_of(t)
        key = tuple(sorted(config.items()))
        ci = t.user_attrs.get(records.VALUE_CI)
        ci = float(ci) if isinstance(ci, int | float) else None
        latest[key] = Measured(t.number, config, float(t.values[0]), ci, _server(t))
    return list(latest.values())


def _server(t: FrozenTrial) -> dict[str, Any]:
    return {k: t.user_attrs[k] for k in SERVER_FIELDS if t.user_attrs.get(k) is not None}


def differences(cfg: Config, study: optuna.Study) -> dict[str, dict[str, Any]]:
    """What differs between the earlier study's world and this config's, field by field."""
    then = study.user_attrs.get(records.STUDY_WORLD)
    if then is None:  # an older study: its settings say the workload, levels and objective
        s = study.user_attrs.get(records.STUDY_CONFIG) or {}
        bench, obj = s.get("benchmark") or {}, s.get("objective") or {}
        then = {
            "workload": bench.get("workload"),
            "levels": bench.get("concurrency"),
            "objective": {
                "mode": obj.get("mode"),
                "level": obj.get("level"),
                "rate": obj.get("rate"),
            },
            "unit_flags": None,
        }
    now = world(cfg)
    out: dict[str, dict[str, Any]] = {}
    for field in ("workload", "levels", "objective"):
        if then.get(field) != now[field]:
            out[field] = {"earlier": then.get(field), "now": now[field]}
    flags_then, flags_now = then.get("unit_flags"), now["unit_flags"]
    if flags_then is not None and flags_now is not None:
        flags_then = secrets.flags(flags_then)  # an earlier study may predate the mask
        for flag in sorted(set(flags_then) | set(flags_now)):
            if flags_then.get(flag) != flags_now.get(flag):
                out[flag] = {"earlier": flags_then.get(flag), "now": flags_now.get(flag)}
    return out


def first_configs(record: Mapping[str, Any], limit: int) -> list[dict[str, Any]]:
    """What the new study deploys first: the earlier winner, then the configs the earlier
    study could not tell from it (their 95 % intervals overlap the winner's), best first, at
    most `limit` in all. A config without an interval counts as measured exactly."""
    best = record.get("best")
    if not best:
        return []
    low = best["value"] * (1.0 - (best.get("ci") or 0.0))
    close = [
        m
        for m in record.get("measured") or []
        if m["config"] != best["config"] and m["value"] * (1.0 + (m.get("ci") or 0.0)) >= low
    ]
    close.sort(key=lambda m: -m["value"])
    return [best["config"], *(m["config"] for m in close)][: max(1, limit)]


@dataclass(frozen=True)
class Check:
    """Whether the earlier study still describes this world, judged on the baseline: the
    config both studies measured first, measured again here."""

    holds: bool
    why: str
    trial: int | None
    """The new study's baseline trial the check read (None: nothing measured)."""

    def record(self) -> dict[str, Any]:
        return {"holds": self.holds, "why": self.why, "trial": self.trial}

    def sentence(self) -> str:
        if self.holds:
            return f"the earlier study holds here: {self.why}; its winner goes first"
        return f"the world moved since the earlier study: {self.why}; this study runs cold"


def check(
    record: Mapping[str, Any],
    baseline: FrozenTrial,
    agreement: Callable[[float | None, float | None], float],
) -> Check:
    """The earlier study against the new study's measured `baseline`: nothing declared
    different (workload, levels, objective, the unit's other flags: `differences`), the same
    server pool (SAME_POOL), and the same value within two single starts' 95 % agreement
    (`agreement` of the two values' intervals: `pruning.agreement`).

    A declared difference settles it whatever the baseline says: a baseline that drafts
    nothing (llama-server's `--spec-type none`) measures the same on copy-heavy traffic as
    on natural text, where the speculating configs are another landscape. A world that
    moved under an unchanged baseline and unchanged settings is left to the pairs'
    disagreement (`prior`). Where it moved, the check costs nothing but the baseline,
    which a cold study measures too."""
    differs = sorted(record.get("differences") or {})
    if differs:
        return Check(False, f"what differs: {', '.join(differs)}", baseline.number)
    now = measured_here(baseline)
    if now is None:
        return Check(False, "the baseline gave no value to compare", baseline.number)
    earlier = next((m for m in record.get("measured") or [] if m["config"] == now.config), None)
    if earlier is None:
        why = "nothing differs, though its baseline was never measured there"
        return Check(True, why, now.trial)
    for field in POOL_FIELDS:
        then, here = earlier["server"].get(field), now.server.get(field)
        numbers = isinstance(then, int | float) and isinstance(here, int | float) and then > 0
        if numbers and abs(here / then - 1.0) > SAME_POOL:
            return Check(False, f"the server reports {field} {here} here, {then} there", now.trial)
    change = now.value / earlier["value"] - 1.0 if earlier["value"] else math.inf
    said = (
        f"the baseline measured {now.value:.1f} here against {earlier['value']:.1f} there "
        f"({100 * change:+.1f} %"
    )
    margin = agreement(earlier.get("ci"), now.ci)
    if abs(change) > margin:
        return Check(False, f"{said}, beyond ±{100 * margin:.1f} %)", now.trial)
    return Check(True, f"{said}, within ±{100 * margin:.1f} %)", now.trial)


def checked_holds(record: Mapping[str, Any]) -> bool:
    """Whether the earlier study's points may steer the new one: once its baseline check held
    (a study from before the check, which queued at once, counts as holding)."""
    verdict = record.get("check")
    if verdict is None:
        return record.get("queued") is not None
    return bool(verdict.get("holds"))


def measured_here(t: FrozenTrial) -> Measured | None:
    """A new study's trial as the check reads it (None: no value to compare)."""
    value = t.values[0] if t.values else None
    if not value or value <= 0:
        return None
    ci = t.user_attrs.get(records.VALUE_CI)
    ci = float(ci) if isinstance(ci, int | float) else None
    return Measured(t.number, config_of(t), float(value), ci, _server(t))


def recorded_from(cfg: Config) -> str | None:
    """The study a warm start of this config's study read, if it has started already (a
    resume, or another worker of a fleet): then it is not checked again."""
    try:
        db = storage.open_storage(cfg.study.storage, source=cfg.source, create=False)
        attrs = db.get_study_user_attrs(db.get_study_id_from_name(cfg.study.name))
    except (AutotuneError, KeyError, *storage.DATABASE_ERRORS):
        return None
    start = attrs.get(records.STUDY_WARM_START)
    return str(start["from"]) if isinstance(start, dict) and start.get("from") else None


def compared(study: optuna.Study) -> list[dict[str, Any]]:
    """Per config measured in both studies: the earlier value against now, and what each
    server said of itself where that changed."""
    start = study.user_attrs.get(records.STUDY_WARM_START)
    if not start:
        return []
    earlier = {tuple(sorted(m["config"].items())): m for m in start.get("measured") or []}
    out = []
    for m in _measured_configs(study):
        e = earlier.get(tuple(sorted(m.config.items())))
        if e is None:
            continue
        row = {
            "config": m.config,
            "earlier_trial": e["trial"],
            "earlier": e["value"],
            "trial": m.trial,
            "now": m.value,
            "change": m.value / e["value"] - 1.0 if e["value"] else None,
        }
        server = {
            k: {"earlier": e["server"].get(k), "now": m.server.get(k)}
            for k in SERVER_FIELDS
            if e["server"].get(k) != m.server.get(k)
        }
        if server:
            row["server"] = server
        out.append(row)
    return out


def summary(study: optuna.Study) -> dict[str, Any] | None:
    """What `status --json` and `best --json` carry of a warm start (None: a cold study)."""
    start = study.user_attrs.get(records.STUDY_WARM_START)
    if not start:
        return None
    keep = ("from", "storage", "at", "best", "differences", "check")
    return {**{k: start.get(k) for k in keep}, "compared": compared(study)}


def sentences(study: optuna.Study) -> list[str]:
    """What `status` and `best` print of a warm start (nothing for a cold study)."""
    start = study.user_attrs.get(records.STUDY_WARM_START)
    if not start:
        return []
    diff = start.get("differences") or {}
    changed = "; ".join(f"{k} {v['earlier']} -> {v['now']}" for k, v in diff.items())
    lines = [
        f"started from study {start['from']} ({start['storage']}): "
        + (f"what differs: {changed}" if changed else "the same settings")
    ]
    verdict = start.get("check")
    if isinstance(verdict, dict):
        lines.append(
            "  " + Check(bool(verdict.get("holds")), str(verdict.get("why")), None).sentence()
        )
    for row in compared(study):
        change = "" if row["change"] is None else f" ({100 * row['change']:+.1f} %)"
        lines.append(
            f"  {_config_text(row['config'])}: {row['earlier']:.1f} there (trial "
            f"{row['earlier_trial']}), {row['now']:.1f} now (trial {row['trial']}){change}"
        )
    return lines


def _config_text(config: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


@dataclass(frozen=True)
class Prior:
    """The earlier study's measurements as the new study's GP takes them."""

    points: tuple[tuple[dict[str, Any], float, float], ...]
    """(config, log value moved by `offset`, extra sd) per config only the earlier study
    measured: the new study's own measurement replaces the earlier one."""
    offset: float
    """Mean log ratio now / earlier over the configs measured in both (0 before any)."""
    disagreement: float
    """The extra sd each earlier point carries (`prior`)."""
    pairs: int


def prior(record: Mapping[str, Any], now: Sequence[tuple[dict[str, Any], float]]) -> Prior:
    """The rule that down-weights the earlier study by what the new one measured.

    Over the k configs measured in both, r = log(now / earlier). The offset b is their mean:
    a world uniformly faster or slower (a new driver, another GPU of the same kind) keeps
    the earlier ranking, which is what the search needs. The disagreement is what is left,
    pooled with the prior PRIOR_DISAGREEMENT as one observation:
    d^2 = (PRIOR_DISAGREEMENT^2 + sum (r - b)^2) / (1 + max(0, k - 1)).
    Every earlier point enters the GP with d as its own extra noise, so that it weighs
    s^2 / (s^2 + d^2) of a new measurement of noise s: at the prior's 5 % against a 2 %
    restart, about a seventh; more as agreeing pairs shrink d; where the worlds disagree by
    20 %, a hundredth, and the study runs as a cold one would. One pair shows no
    disagreement by construction (its ratio is the offset): it takes two to measure one.
    An earlier study scored on another objective (mode, level or rate) gives no points: its
    values are another quantity.
    """
    key = lambda c: tuple(sorted(c.items()))  # noqa: E731
    if "objective" in (record.get("differences") or {}):
        return Prior((), 0.0, math.inf, 0)
    earlier = {key(m["config"]): m for m in record.get("measured") or [] if m["value"] > 0}
    ratios = [math.log(v / earlier[key(c)]["value"]) for c, v in now if key(c) in earlier and v > 0]
    b = sum(ratios) / len(ratios) if ratios else 0.0
    k = len(ratios)
    d2 = (PRIOR_DISAGREEMENT**2 + sum((r - b) ** 2 for r in ratios)) / (1 + max(0, k - 1))
    d = math.sqrt(d2)
    seen = {key(c) for c, _ in now}
    points = tuple(
        (dict(m["config"]), math.log(m["value"]) + b, d)
        for k_, m in earlier.items()
        if k_ not in seen
    )
    return Prior(points, b, d, k)
