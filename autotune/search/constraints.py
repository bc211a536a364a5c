"""Constraints in both forms: the named ones Optuna 5 stores, and the list optuna-dashboard reads.

optuna-dashboard 0.21 knows a trial's feasibility only from the old list-valued
trial system attribute `constraints`; Optuna 5's `trial.set_constraint` stores
one `constraints:<key>` attribute per key. The study writes both (see
dashboard.py for why the ranking, and so TPE, is unchanged).
"""

from __future__ import annotations

from collections.abc import Mapping

import optuna
from optuna.trial import FrozenTrial

from autotune.search import objective
from autotune.store import optuna_private

#: The trial system attribute optuna-dashboard 0.21 reads (Optuna's `_CONSTRAINTS_KEY`).
LEGACY_KEY = "constraints"
_KEYED_PREFIX = LEGACY_KEY + ":"


def keyed_constraints(t: FrozenTrial) -> dict[str, float]:
    """A trial's named constraints (`set_constraint`), without the list form's "0", "1", ...

    `FrozenTrial.constraints` returns both forms merged; copying that into
    another trial (a reused result) would turn the list entries into named keys.
    """
    return {
        key[len(_KEYED_PREFIX) :]: float(value)
        for key, value in t.system_attrs.items()
        if key.startswith(_KEYED_PREFIX)
    }


def legacy_list(constraints: Mapping[str, float]) -> list[float]:
    """The values in `objective.CONSTRAINT_KEYS` order, then any other keys by name."""
    known = [k for k in objective.CONSTRAINT_KEYS if k in constraints]
    others = sorted(k for k in constraints if k not in objective.CONSTRAINT_KEYS)
    return [float(constraints[k]) for k in (*known, *others)]


def write_legacy_constraints(
    study: optuna.Study, trial_id: int, constraints: Mapping[str, float]
) -> None:
    """Also store a running trial's constraints as the list optuna-dashboard 0.21 reads.

    Call it with the same values given to `trial.set_constraint`, before
    `study.tell` (a finished trial's attributes cannot change).
    """
    if constraints:
        db = optuna_private.storage(study)
        db.set_trial_system_attr(trial_id, LEGACY_KEY, legacy_list(constraints))
