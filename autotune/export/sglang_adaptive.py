"""SGLang's adaptive config that runs each load's static winner (`autotune export-adaptive`).

A static study answers "which step count is best at 1, 16, 64 clients", and the
answers differ: deep chains win alone, shallow ones under load. SGLang's adaptive
speculation can switch by batch size, so the study's winners become one config:
each concurrency level's best chain (topk 1) gets the batch sizes from just above
the previous level's up to its own (SGLang routes a batch by its size, unpadded).

`--measure` deploys it, and SGLang's built-in adaptive config, each as one more
measurement of every level followed by the changing-load phase (`benchmark.load_phase`;
without it the default is deployed only when the study has not measured it). They are recorded
in the study (user attribute `adaptive_probes`), not as Optuna trials: they are
not points of the search space, so the sampler, the finalists and "best" never
take them for one. The report compares them per level with the static winners.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import Config
from autotune.errors import AutotuneError, ConfigError
from autotune.export import probes
from autotune.export.probes import EXPORTED, PROBES, Probe
from autotune.search import records
from autotune.search import study as st

if TYPE_CHECKING:
    from autotune.run.trial import TrialPipeline

SWITCH_FLAG = "--speculative-adaptive"
CONFIG_FLAG = "--speculative-adaptive-config"
DEFAULT = "sglang-default"


@dataclass(frozen=True)
class Winner:
    concurrency: int
    trial: int
    steps: int
    tok_s: float


def knobs(cfg: Config) -> tuple[str, str]:
    """(switch parameter, config-file parameter) of the space; ConfigError without them."""
    space = cfg.space
    by_flag = space.launch_flags()
    switch, file = by_flag.get(SWITCH_FLAG), by_flag.get(CONFIG_FLAG)
    if switch is None or file is None or space.params[file].file is None:
        raise ConfigError(
            space.source,
            "params",
            f"export-adaptive needs a {SWITCH_FLAG} switch (type: bool) and a {CONFIG_FLAG} "
            "companion file among the parameters, as in search_spaces/sglang-adaptive.yaml",
        )
    return switch, file


def static_winners(cfg: Config, study: optuna.Study) -> list[Winner]:
    """Per concurrency level, the measured chain (topk 1, static) with the most tok/s there."""
    switch, _ = knobs(cfg)
    winners = []
    trials = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
              if _static_chain(t, switch) and st.is_feasible(t)]  # fmt: skip
    for c in cfg.benchmark.concurrency:
        measured = [(t, t.user_attrs.get(records.at(records.OUTPUT_TOK_S_AT, c))) for t in trials]
        measured = [(t, v) for t, v in measured if v]
        if not measured:
            continue
        t, v = max(measured, key=lambda tv: tv[1])
        steps = int(st.trial_config(t)["speculative_num_steps"])
        winners.append(Winner(c, t.number, steps, float(v)))
    if not winners:
        raise AutotuneError(
            f"study {cfg.study.name!r} has no feasible static chain (topk 1) measured yet: "
            "run the study first"
        )
    return winners


def _static_chain(t: FrozenTrial, switch: str) -> bool:
    config = st.trial_config(t)
    if config.get(switch) or t.user_attrs.get(records.REUSED_FROM) is not None:
        return False
    return "speculative_num_steps" in config and config.get("speculative_eagle_topk", 1) == 1


def build(winners: list[Winner]) -> dict[str, Any]:
    """The adaptive config: one batch-size range per level, consecutive equal winners merged."""
    out: dict[str, Any] = {}
    previous: int | None = None
    last_steps: int | None = None
    for w in sorted(winners, key=lambda w: w.concurrency):
        # SGLang 0.5.23 routes a batch by its own size (sim/adaptive.py, routing_sizes).
        start = 1 if previous is None else previous + 1
        previous = w.concurrency
        if w.steps == last_steps:
            continue
        out[str(start)] = {"candidate_steps": [w.steps]}
        last_steps = w.steps
    return out


def export(cfg: Config, out: Path | None) -> tuple[Path, dict[str, Any], list[Winner]]:
    """Write the config built from the study's winners; returns (path, config, winners)."""
    study = st.open_study(cfg, create=False)
    winners = static_winners(cfg, study)
    data = build(winners)
    path = out or probes.default_path(cfg, "adaptive")
    probes.write(study, path, json.dumps(data, indent=2) + "\n", data, winners)
    return path, data, winners


def measure(cfg: Config, data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Deploy and benchmark the exported config (and SGLang's default adaptive config unless
    the study measured it); record them in the study; leave the server as a study would."""
    switch, file = knobs(cfg)
    study = st.open_study(cfg, create=False)
    param = cfg.space.params[file]
    assert param.file is not None
    exported = next(c for c in param.choices or () if c != param.file.builtin)
    wanted: dict[str, tuple[dict[str, Any], str | None]] = {
        EXPORTED: ({switch: True, file: exported}, json.dumps(data)),
    }
    # SGLang's default is measured here when the study did not, or, with the changing-load
    # phase on, to put it through the phase too (a study's trials do not run it).
    unmeasured = _measured_default(study, switch, file, param) is None
    if param.file.builtin is not None and (unmeasured or cfg.benchmark.load_phase):
        wanted[DEFAULT] = ({switch: True, file: param.file.builtin}, None)

    def probes_for(pipeline: TrialPipeline) -> list[Probe]:
        out = []
        for label, (config, text) in wanted.items():
            files = pipeline.files_for(config)
            if text is not None:
                files = dict.fromkeys(files, text)
            out.append(Probe(label, config, pipeline.unit_for(config), files,
                             text or "SGLang's default"))  # fmt: skip
        return out

    return probes.measure(cfg, study, probes_for)


def _measured_default(
    study: optuna.Study, switch: str, file: str, param: Any
) -> FrozenTrial | None:
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        config = st.trial_config(t)
        if config.get(switch) and config.get(file) == param.file.builtin:
            return t
    return None


def comparison(cfg: Config, study: optuna.Study) -> list[dict[str, Any]]:
    """Per level: the static winner, the best adaptive trial of the study, SGLang's default
    adaptive config and the exported one (tok/s; None where not measured)."""
    switch, file = knobs(cfg)
    param = cfg.space.params[file]
    measured = study.user_attrs.get(PROBES) or {}
    trials = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
              if st.is_feasible(t) and t.user_attrs.get(records.REUSED_FROM) is None]  # fmt: skip
    default = _measured_default(study, switch, file, param)
    rows = []
    for c in cfg.benchmark.concurrency:
        key = records.at(records.OUTPUT_TOK_S_AT, c)

        def best(pool: list[FrozenTrial], k: str = key) -> tuple[FrozenTrial | None, float | None]:
            scored = [(t, t.user_attrs.get(k)) for t in pool if t.user_attrs.get(k)]
            if not scored:
                return None, None
            t, v = max(scored, key=lambda tv: tv[1])
            return t, float(v)

        static_t, static_v = best([t for t in trials if _static_chain(t, switch)])
        adaptive_t, adaptive_v = best([t for t in trials if st.trial_config(t).get(switch)])
        default_v = default.user_attrs.get(key) if default is not None else None
        if default_v is None:
            default_v = (measured.get(DEFAULT) or {}).get("levels", {}).get(str(c))
        exported_v = (measured.get(EXPORTED) or {}).get("levels", {}).get(str(c))
        rows.append(
            {
                "concurrency": c,
                "static": static_v,
                "static_steps": None
                if static_t is None
                else st.trial_config(static_t).get("speculative_num_steps"),
                "static_trial": None if static_t is None else static_t.number,
                "adaptive": adaptive_v,
                "adaptive_candidates": None
                if adaptive_t is None
                else st.trial_config(adaptive_t).get(file),
                "default": None if default_v is None else float(default_v),
                "exported": None if exported_v is None else float(exported_v),
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The comparison as text: tok/s per level, the winner marked."""

    def cell(v: float | None) -> str:
        return "—" if v is None else f"{v:.1f}"

    lines = [
        f"{'level':>6}  {'static (steps)':>16}  {'adaptive trial':>16}  "
        f"{'SGLang default':>14}  {'exported':>9}  winner"
    ]
    names = {"static": "static", "adaptive": "adaptive trial", "default": "SGLang default",
             "exported": "exported"}  # fmt: skip
    for r in rows:
        scored = {k: r[k] for k in names if r[k] is not None}
        winner = names[max(scored, key=lambda k: scored[k])] if scored else "—"
        static = f"{cell(r['static'])} ({r['static_steps']})" if r["static"] else "—"
        lines.append(
            f"c={r['concurrency']:<4}  {static:>16}  {cell(r['adaptive']):>16}  "
            f"{cell(r['default']):>14}  {cell(r['exported']):>9}  {winner}"
        )
    return "\n".join(lines)
