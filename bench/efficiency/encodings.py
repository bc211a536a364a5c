"""Alternative encodings of a search space for the sampler, measured against space.py's own.

Each is a `SearchSpace` whose `distributions`/`decode`/`encode` differ, so the
study loop runs unchanged; a winner becomes a diff to autotune/space.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optuna.distributions import BaseDistribution, IntDistribution

from autotune.space import Config, SearchSpace

RANK_SUFFIX = "_rank"


class OrdinalChoices(SearchSpace):
    """Numeric choices (topk: 1, 2, 4, 8) are suggested as their rank, an int.

    A categorical tells the sampler nothing about 4 lying between 2 and 8; as
    a rank, a good result at topk 4 raises the odds of 8 and of 2, which is
    how the knob behaves (the tree widens step by step).
    """

    def __init__(self, base: SearchSpace) -> None:
        super().__init__(base.source, base.engine, list(base.params.values()), base.rules)
        self.ranked = {
            p.name: tuple(sorted(p.choices))  # type: ignore[type-var]
            for p in self.params.values()
            if p.choices is not None and not p.fixed and p.type == "int"
        }

    def distributions(self) -> dict[str, BaseDistribution]:
        out = {}
        for name, dist in super().distributions().items():
            if name in self.ranked:
                out[name + RANK_SUFFIX] = IntDistribution(0, len(self.ranked[name]) - 1)
            else:
                out[name] = dist
        return out

    def decode(self, study_params: Mapping[str, Any]) -> Config:
        params = dict(study_params)
        for name, choices in self.ranked.items():
            params[name] = choices[int(params.pop(name + RANK_SUFFIX))]
        return super().decode(params)

    def encode(self, config: Mapping[str, Any]) -> dict[str, Any]:
        study = super().encode(config)
        for name, choices in self.ranked.items():
            study[name + RANK_SUFFIX] = choices.index(study.pop(name))
        return study


ENCODINGS = {"frac": lambda space: space, "ordinal": OrdinalChoices}
