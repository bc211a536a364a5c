"""The winning unit file against the original, from the trials' stored files.

The original is what trial 0 (the baseline) deployed, else the config's unit
file; the winner's is what its trial deployed (the measured trial's, for a
reused result). When a file was not stored (a study recorded before trials had
files, or a disk error at the time), the unit is rendered again the way the
trial pipeline renders it: the original with the trial's flags patched in.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.artifacts import get_all_artifact_meta
from optuna.artifacts.exceptions import ArtifactNotFound

from autotune.config import Config
from autotune.errors import AutotuneError
from autotune.report.data import StudyData, TrialRow
from autotune.store import optuna_private
from autotune.store.artifacts import artifact_store
from autotune.store.storage import DATABASE_ERRORS

UNIT_SUFFIX = "-unit.service"


@dataclass(frozen=True)
class UnitDiff:
    original_source: str
    """Where the original came from, for the reader: 'trial 0 (baseline)' or a path."""
    winner_source: str
    winner: int
    lines: list[str]
    """A unified diff, without line endings; empty when the units are the same."""
    winner_text: str


class TrialFiles:
    """Reads the files `autotune.store.artifacts` stored for each trial."""

    def __init__(self, study: optuna.Study, storage_url: str) -> None:
        self.storage = optuna_private.storage(study)
        self.trials = {t.number: t for t in study.get_trials(deepcopy=False)}
        self.store = artifact_store(storage_url, getattr(self.storage, "engine", None))

    def text(self, number: int, suffix: str) -> str | None:
        trial = self.trials.get(number)
        if self.store is None or trial is None:
            return None
        for meta in get_all_artifact_meta(trial, storage=self.storage):
            if meta.filename.endswith(suffix):
                try:
                    with self.store.open_reader(meta.artifact_id) as f:
                        return f.read().decode("utf-8", errors="replace")
                except (ArtifactNotFound, OSError, *DATABASE_ERRORS):
                    return None
        return None


def unit_diff(cfg: Config, data: StudyData, files: TrialFiles) -> UnitDiff | None:
    """The winner's unit against the original; None while no trial is feasible."""
    winner = data.winner
    if winner is None:
        return None
    original, original_source = _original(cfg, data, files)
    measured_as = winner.reused_from if winner.reused_from is not None else winner.number
    text = files.text(measured_as, UNIT_SUFFIX)
    source = f"trial {measured_as}'s deployed unit"
    if text is None:
        text = _render(cfg, original, winner)
        source = f"trial {winner.number}'s flags patched into the original"
    lines = list(
        difflib.unified_diff(
            original.splitlines(),
            text.splitlines(),
            fromfile=f"original ({original_source})",
            tofile=f"winner (trial {winner.number})",
            lineterm="",
        )
    )
    return UnitDiff(original_source, source, winner.number, lines, text)


def _original(cfg: Config, data: StudyData, files: TrialFiles) -> tuple[str, str]:
    base = data.baseline
    if base is not None:
        text = files.text(base.number, UNIT_SUFFIX)
        if text is not None:
            return text, f"trial {base.number}, the baseline"
    path = Path(cfg.target.unit_file)
    try:
        return path.read_text(), str(path)
    except OSError as exc:
        raise AutotuneError(f"cannot read the original unit {path}: {exc.strerror}") from None


def _render(cfg: Config, original: str, t: TrialRow) -> str:
    params = {k: v for k, v in t.config.items() if k in cfg.space.params}
    if not params or not cfg.space.complete(params):
        return original  # the unit as is (a baseline that ran the file unchanged)
    return cfg.space.patch_unit(original, params, unit_dir=str(cfg.target.unit_file.parent))
