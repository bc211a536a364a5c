from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from autotune.errors import ConfigError
from autotune.space import load_space, space_from_dict

REPO = Path(__file__).resolve().parent.parent
EAGLE = REPO / "search_spaces" / "sglang-eagle.yaml"
MTP = REPO / "search_spaces" / "sglang-mtp.yaml"
STEPS, TOPK, DRAFT = (
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)


def test_eagle_space_enumerates_every_distinct_config() -> None:
    space = load_space(EAGLE)
    configs = [c.params for c in space.enumerate()]
    # topk 1: 8 chains; topk k>1: draft steps+1 .. min(64, s*k+1) for each step count s.
    expected = 8 + sum(min(64, s * k + 1) - s for k in (2, 4, 8) for s in range(1, 9))
    assert len(configs) == expected == 427
    assert len({tuple(c.items()) for c in configs}) == len(configs)
    for c in configs:
        assert c[STEPS] + 1 <= c[DRAFT] <= min(64, c[STEPS] * c[TOPK] + 1)
        if c[TOPK] == 1:
            assert c[DRAFT] == c[STEPS] + 1


def test_encode_decode_round_trip_for_every_config() -> None:
    space = load_space(EAGLE)
    for cand in space.enumerate():
        assert space.decode(space.encode(cand.params)) == cand.params


def test_distributions_do_not_depend_on_other_params() -> None:
    """Multivariate TPE models only parameters present with one distribution in every trial."""
    space = load_space(EAGLE)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(0))
    seen = set()
    for _ in range(200):
        trial = study.ask()
        config = space.decode(space.suggest(trial))
        assert space.check(config) is None
        seen.add(tuple(config.items()))
        study.tell(trial, 1.0)
    dists = {tuple(sorted((k, repr(v)) for k, v in t.distributions.items())) for t in study.trials}
    assert len(dists) == 1
    assert len(seen) > 100  # the encoding reaches most of the space


def test_mtp_space_is_a_chain() -> None:
    space = load_space(MTP)
    configs = [c.params for c in space.enumerate()]
    assert [(c[STEPS], c[TOPK], c[DRAFT]) for c in configs] == [(s, 1, s + 1) for s in range(1, 9)]
    assert list(space.distributions()) == [STEPS]
    assert space.flags(configs[2]) == {
        "--speculative-num-steps": "3",
        "--speculative-eagle-topk": "1",
        "--speculative-num-draft-tokens": "4",
    }


def test_require_rule_marks_invalid() -> None:
    space = space_from_dict(
        {
            "params": {
                "a": {"flag": "--a", "low": 1, "high": 3},
                "b": {"flag": "--b", "choices": [1, 2]},
            },
            "rules": [{"require": "a * b <= 4", "why": "a*b too large"}],
        },
        "inline",
    )
    cands = {(c.params["a"], c.params["b"]): c for c in space.enumerate()}
    assert not cands[(3, 2)].valid
    assert cands[(3, 2)].reason == "a*b too large"
    assert cands[(2, 2)].valid


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {
                "params": {
                    "a": {"flag": "--a", "low": 1, "high": "b"},
                    "b": {"flag": "--b", "low": "a", "high": 3},
                }
            },
            "cycle",
        ),
        (
            {"params": {"a": {"flag": "--a", "low": 1, "high": "__import__('os')"}}},
            "only min/max/abs/round may be called",
        ),
        ({"params": {"a": {"flag": "--a", "low": 1, "high": "(1).real"}}}, "unsupported syntax"),
        ({"params": {"a": {"flag": "a", "low": 1, "high": 2}}}, "must be a launch flag"),
        ({"params": {"a": {"flag": "--a", "low": 3, "high": 2}}}, "low (3) must be a number <="),
        ({"params": {"a": {"flag": "--a", "choices": [1, 1]}}}, "has duplicates"),
        ({"params": {"a": {"flag": "--a", "low": 1}}}, "give both low and high"),
        ({"params": {"a": {"flag": "--a", "low": 1, "high": 2, "choices": [1]}}}, "exactly one"),
        ({"params": {}}, "non-empty mapping"),
        (
            {"params": {"a": {"flag": "--a", "low": 1, "high": 2}}, "rules": [{"when": "a > 1"}]},
            "a rule needs",
        ),
        ({"params": {"a": {"flag": "--a", "low": 0, "high": 2, "log": True}}}, "needs low > 0"),
    ],
)
def test_bad_space_is_a_config_error(spec: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        space_from_dict(spec, "space.yaml")
    assert message in str(err.value)
    assert str(err.value).startswith("space.yaml")


def test_memory_knobs_are_named_by_the_space_file() -> None:
    assert load_space(EAGLE).memory_grows_with == (STEPS, TOPK, DRAFT)


@pytest.mark.parametrize(
    "value,problem",
    [
        ("steps", "must be a list of parameter names"),
        (["speculative_num_steps", "nope"], "'nope' is not a numeric parameter of this space"),
    ],
)
def test_bad_memory_knobs_name_the_key(tmp_path, value, problem) -> None:
    data = yaml.safe_load(EAGLE.read_text())
    data["memory_grows_with"] = value
    with pytest.raises(ConfigError) as err:
        space_from_dict(data, "space.yaml")
    assert "memory_grows_with" in str(err.value) and problem in str(err.value)
