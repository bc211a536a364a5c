"""Write an exported config, record it on the study, and measure it as a probe.

A probe is a deployment outside the search space (the base unit with the exported config,
or an engine's own default), recorded in the study's user attribute `adaptive_probes`, not
as an Optuna trial: the sampler, the finalists and `best` never take it for a point of the
space. Each probe is measured at every level and then through the changing-load phase
(`benchmark.load_phase`), because an exported schedule breaks where the load changes, not
at the levels it was derived from; afterwards the server is left as a finished study
leaves it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from autotune.config import Config
from autotune.errors import AutotuneError
from autotune.log import get
from autotune.search import records

if TYPE_CHECKING:
    from autotune.run.trial import TrialPipeline

log = get("autotune.export")

PROBES = records.STUDY_ADAPTIVE_PROBES
EXPORTED = "exported"
"""The probe of the exported config (both exporters)."""


@dataclass(frozen=True)
class Probe:
    """One deployment to measure: what the pipeline deploys and how the log names it."""

    label: str
    config: dict[str, Any] | None
    """The space's params it stands for, or None for a config outside the space."""
    unit: str
    files: dict[str, str | None]
    described: str


def default_path(cfg: Config, suffix: str) -> Path:
    """Beside the study's artifacts: `<study>-<suffix>.json`."""
    from autotune.store.artifacts import artifact_dir

    return artifact_dir(cfg.study.storage).parent / f"{cfg.study.name}-{suffix}.json"


def write(
    study: optuna.Study, path: Path, text: str, data: Mapping[str, Any], winners: Sequence[Any]
) -> None:
    """Write `text` to `path` and record the export (config, the winners it came from, the
    path) on the study, where `status` and the report find it."""
    try:
        path.write_text(text)
    except OSError as exc:
        raise AutotuneError(f"cannot write {path}: {exc.strerror}") from None
    study.set_user_attr(
        records.STUDY_ADAPTIVE_EXPORT,
        {"config": dict(data), "winners": [dataclasses.asdict(w) for w in winners],
         "path": str(path)},
    )  # fmt: skip


def measure(
    cfg: Config, study: optuna.Study, probes_for: Callable[[TrialPipeline], list[Probe]]
) -> dict[str, dict[str, Any]]:
    """Deploy and benchmark each probe `probes_for` gives (it sees the pipeline, whose base
    unit is the host's); record each in the study as it finishes; every probe recorded."""
    from autotune.run import deployment, loop

    deployer = deployment.deployer_for(cfg)
    recorded = dict(study.user_attrs.get(PROBES) or {})
    try:
        deployer.preflight()
        pipeline = deployment.pipeline_for(cfg, deployer)
        pipeline.load_phase = cfg.benchmark.load_phase
        # Built before anything is deployed: a probe that cannot be built changes nothing.
        wanted = probes_for(pipeline)
        try:
            for probe in wanted:
                log.info("measuring an exported config", probe=probe.label, config=probe.described)
                result = pipeline.run(
                    probe.config, lambda c: None, deployment=(probe.unit, probe.files)
                )
                recorded[probe.label] = record(
                    result.attrs, result.score.values, probe.unit, probe.files
                )
                study.set_user_attr(PROBES, recorded)
                log.info("measured", probe=probe.label, value=recorded[probe.label]["value"])
        finally:
            # Never leave the server on a probe: as a finished study leaves it.
            try:
                loop.finish(cfg, study, deployer, pipeline)
            except AutotuneError as err:
                log.error("could not put a known config back", error=str(err))
    finally:
        deployer.close()
    return recorded


def record(
    attrs: Mapping[str, Any], values: Any, unit: str, files: Mapping[str, str | None]
) -> dict[str, Any]:
    """A probe as the study keeps it: its value, tok/s per level, the phase, any failure."""
    levels = {str(r["concurrency"]): round(float(r["output_throughput"]), 2)
              for r in attrs.get(records.LEVELS) or []}  # fmt: skip
    return {
        "measured_at": time.time(),
        "feasible": attrs.get(records.FEASIBLE),
        "value": round(float(values[0]), 2) if values else None,
        "levels": levels,
        "max_running_requests": attrs.get(records.MAX_RUNNING_REQUESTS),
        "load_phase": attrs.get(records.LOAD_PHASE),
        "failure": attrs.get(records.FAILURE),
        "reason": attrs.get(records.REASON),
        "unit": unit,
        "files": dict(files),
    }
