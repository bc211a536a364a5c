"""vLLM's per-batch-size draft length from a study (`autotune export-adaptive` on a space
that tunes the draft length inside a JSON flag).

vLLM (0.32.0) switches the draft length by the batch's size with one more field of
`--speculative-config`, `num_speculative_tokens_per_batch_size: [[first, last, K], ...]`
(inclusive ranges from 1; K capped by `num_speculative_tokens`, 0 drafts nothing; a batch
beyond the last range keeps its K: vllm/v1/spec_decode/dynamic/utils.py). Only the draft
length varies, so the export keeps every other field of the study's best speculating
config and gives each concurrency level the draft length that won there: the best
measured trial of that level, `none` (K 0) included. Each level gets the batch sizes from
just above the previous level's up to its own.

`--measure` deploys the result as one config outside the space (the base unit with that
JSON) and records it in the study (user attribute `adaptive_probes`, as SGLang's export),
then leaves the server as a finished study would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from autotune.config import Config
from autotune.errors import AutotuneError, ConfigError
from autotune.export import probes
from autotune.export.probes import EXPORTED, PROBES, Probe
from autotune.search import records
from autotune.search import study as st
from autotune.space import SearchSpace

if TYPE_CHECKING:
    from autotune.run.trial import TrialPipeline

TOKENS = "num_speculative_tokens"
SCHEDULE = "num_speculative_tokens_per_batch_size"


@dataclass(frozen=True)
class LevelWinner:
    concurrency: int
    trial: int
    tokens: int
    """Its draft length; 0 for a config that does not speculate."""
    tok_s: float


def applies(space: SearchSpace) -> bool:
    """Whether the space tunes a draft length inside a JSON flag (vLLM's spaces)."""
    return any(p.json is not None and p.json.key == TOKENS for p in space.params.values())


def _tokens_flag(space: SearchSpace) -> str:
    """The JSON flag that holds the draft length; ConfigError without one."""
    for p in space.params.values():
        if p.json is not None and p.json.key == TOKENS:
            return p.flag
    raise ConfigError(
        space.source, "params", f"a per-batch-size schedule needs a json: {TOKENS} parameter"
    )


def level_winners(cfg: Config, study: optuna.Study) -> list[LevelWinner]:
    """Per concurrency level, the feasible measured trial with the most tok/s there."""
    flag = _tokens_flag(cfg.space)
    # Only trials whose config is a point of the space: a unit run as is says no K of its own.
    trials = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
              if st.is_feasible(t) and t.user_attrs.get(records.REUSED_FROM) is None
              and t.user_attrs.get(records.CONFIG)
              and cfg.space.complete(st.trial_config(t))]  # fmt: skip
    winners = []
    for c in cfg.benchmark.concurrency:
        scored = [(t, t.user_attrs.get(records.at(records.OUTPUT_TOK_S_AT, c))) for t in trials]
        scored = [(t, float(v)) for t, v in scored if v]
        if not scored:
            continue
        t, v = max(scored, key=lambda tv: tv[1])
        fields = cfg.space.json_objects(st.trial_config(t)).get(flag, {})
        winners.append(LevelWinner(c, t.number, int(fields.get(TOKENS, 0)), v))
    if not any(w.tokens for w in winners):
        raise AutotuneError(
            f"study {cfg.study.name!r} has no speculating config that won a level: "
            "nothing to schedule"
        )
    return winners


def build(cfg: Config, study: optuna.Study, winners: list[LevelWinner]) -> dict[str, Any]:
    """The JSON value: the best speculating trial's fields, the cap, and the schedule."""
    flag = _tokens_flag(cfg.space)
    speculating = [t for t in st.best_trials(study)
                   if cfg.space.json_objects(st.trial_config(t)).get(flag)]  # fmt: skip
    if not speculating:
        ranked = sorted(
            (t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
             if st.is_feasible(t) and cfg.space.json_objects(st.trial_config(t)).get(flag)),
            key=lambda t: t.values[0] if t.values else 0.0,
            reverse=True,
        )  # fmt: skip
        speculating = ranked
    if not speculating:
        raise AutotuneError(f"study {cfg.study.name!r} has no feasible speculating trial")
    base = dict(cfg.space.json_objects(st.trial_config(speculating[0]))[flag])
    base[TOKENS] = max(w.tokens for w in winners)
    base[SCHEDULE] = schedule(winners)
    return base


def schedule(winners: list[LevelWinner]) -> list[list[int]]:
    """`[[first, last, K], ...]`: each level's K from just above the level below up to its
    own batch size, neighbours with the same K merged."""
    out: list[list[int]] = []
    previous = 0
    for w in sorted(winners, key=lambda w: w.concurrency):
        if out and out[-1][2] == w.tokens:
            out[-1][1] = w.concurrency
        else:
            out.append([previous + 1, w.concurrency, w.tokens])
        previous = w.concurrency
    return out


def with_unit_fields(cfg: Config, unit_text: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` with the fields of the unit's own JSON value that the space does not set (a
    draft model's path), as every trial deployed them."""
    from autotune.unit import unitfile

    flag = _tokens_flag(cfg.space)
    current = unitfile.parse_exec_start(unit_text).flags().get(flag)
    merged = cfg.space.merged_json(flag, json.dumps(dict(data)), current)
    return json.loads(merged) if merged else dict(data)


def export(cfg: Config, out: Path | None) -> tuple[Path, dict[str, Any], list[LevelWinner]]:
    """Write the JSON built from the study's per-level winners; (path, value, winners)."""
    from autotune.run import deployment

    study = st.open_study(cfg, create=False)
    winners = level_winners(cfg, study)
    data = build(cfg, study, winners)
    deployer = deployment.deployer_for(cfg)
    try:
        data = with_unit_fields(cfg, deployer.original_unit(), data)
    finally:
        deployer.close()
    path = out or probes.default_path(cfg, "schedule")
    probes.write(study, path, json.dumps(data) + "\n", data, winners)
    return path, data, winners


def measure(cfg: Config, data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Deploy and benchmark the schedule once; record it in the study; leave the server as
    a finished study would."""
    from autotune.unit import unitfile

    flag = _tokens_flag(cfg.space)

    def probes_for(pipeline: TrialPipeline) -> list[Probe]:
        value = json.dumps(with_unit_fields(cfg, pipeline.base_unit, data))
        unit = unitfile.patch_unit(pipeline.base_unit, {flag: value}, [])
        return [Probe(EXPORTED, None, unit, {}, value)]

    return probes.measure(cfg, st.open_study(cfg, create=False), probes_for)


def comparison(cfg: Config, study: optuna.Study) -> str:
    """Per level: the level's winner (its draft length) against the measured schedule."""
    probe = (study.user_attrs.get(PROBES) or {}).get(EXPORTED) or {}
    measured = probe.get("levels") or {}
    lines = [f"{'level':>6}  {'best static (K)':>18}  {'schedule':>9}"]
    for w in level_winners(cfg, study):
        got = measured.get(str(w.concurrency))
        mine = "—" if got is None else f"{got:.1f}"
        lines.append(f"c={w.concurrency:<4}  {w.tok_s:>12.1f} ({w.tokens})  {mine:>9}")
    if probe.get("failure"):
        lines.append(f"the schedule failed: {probe['failure']}: {probe.get('reason')}")
    return "\n".join(lines)
