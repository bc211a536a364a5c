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

The package by client: `schema` reads and checks a space file, `sampler_view` serves the
sampler, `unit_view` the unit writer, `physics_view` the engine physics, all on `base`;
`values` holds the types they share.
"""

from autotune.space.schema import load_space, space_from_dict
from autotune.space.search_space import SearchSpace
from autotune.space.values import (
    ENUMERABLE_LIMIT,
    FRACTION_SUFFIX,
    Candidate,
    CompanionFile,
    DraftShape,
    JsonField,
    Param,
    Params,
    Rule,
    Value,
    cast,
)

__all__ = [
    "ENUMERABLE_LIMIT",
    "FRACTION_SUFFIX",
    "Candidate",
    "CompanionFile",
    "DraftShape",
    "JsonField",
    "Param",
    "Params",
    "Rule",
    "SearchSpace",
    "Value",
    "cast",
    "load_space",
    "space_from_dict",
]
