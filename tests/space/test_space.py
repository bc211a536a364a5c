from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from autotune.errors import ConfigError
from autotune.space import SearchSpace, load_space, space_from_dict

REPO = Path(__file__).resolve().parents[2]
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


@pytest.mark.parametrize(
    "value,problem",
    [
        (["steps"], "must be an expression over the parameters"),
        ("speculative_num_steps * width", "width"),
        ("speculative_num_steps / (speculative_eagle_topk - 1)", "cannot evaluate at"),
    ],
)
def test_bad_memory_per_request_names_the_key(value, problem) -> None:
    data = yaml.safe_load(EAGLE.read_text())
    data["memory_per_request"] = value
    with pytest.raises(ConfigError) as err:
        space_from_dict(data, "space.yaml")
    assert "memory_per_request" in str(err.value) and problem in str(err.value)


# -- parameters that apply only under a condition -------------------------------------
CONDITIONAL = {
    "engine": "llama.cpp",
    "params": {
        "spec_type": {"flag": "--spec-type", "type": "str", "choices": ["none", "a", "b"]},
        "n_max": {
            "flag": "--n-max",
            "type": "int",
            "choices": [2, 4, 8],
            "when": "spec_type != 'none'",
        },
        "a_size": {
            "flag": "--a-size",
            "type": "int",
            "low": 1,
            "high": 3,
            "when": "spec_type == 'a'",
        },
        "n_min": {
            "flag": "--n-min",
            "type": "int",
            "low": 0,
            "high": "n_max",
            "when": "spec_type in ('a', 'b')",
        },
    },
    "rules": [{"require": "n_min <= n_max", "why": "n_min above n_max"}],
}


def test_a_knob_that_does_not_apply_does_not_multiply_the_space() -> None:
    space = space_from_dict(CONDITIONAL, "inline")
    configs = [c.params for c in space.enumerate()]
    nmin = {2: 3, 4: 5, 8: 9}  # values of n_min for each n_max
    # none: 1 config; a: 3 sizes x sum(nmin); b: sum(nmin)
    assert len(configs) == 1 + 3 * sum(nmin.values()) + sum(nmin.values())
    assert {"spec_type": "none"} in configs
    for c in configs:
        if c["spec_type"] != "a":
            assert "a_size" not in c
        if c["spec_type"] == "none":
            assert set(c) == {"spec_type"}


def test_decoding_drops_knobs_that_do_not_apply_whatever_the_sampler_said() -> None:
    space = space_from_dict(CONDITIONAL, "inline")
    dists = space.distributions()
    assert set(dists) == {"spec_type", "n_max", "a_size", "n_min_frac"}
    one = space.decode({"spec_type": "none", "n_max": 8, "a_size": 3, "n_min_frac": 0.9})
    two = space.decode({"spec_type": "none", "n_max": 2, "a_size": 1, "n_min_frac": 0.1})
    assert one == two == {"spec_type": "none"}
    assert space.key(one) == space.key(two)
    b = space.decode({"spec_type": "b", "n_max": 4, "a_size": 3, "n_min_frac": 0.99})
    assert b == {"spec_type": "b", "n_max": 4, "n_min": 4}
    assert space.decode(space.encode(b)) == b
    assert space.check(b) is None and space.complete(b)
    assert not space.complete({"spec_type": "a", "n_max": 4})


def test_flags_of_knobs_that_do_not_apply_are_taken_out_of_the_unit() -> None:
    space = space_from_dict(CONDITIONAL, "inline")
    unit = (
        "[Service]\nExecStart=/usr/bin/llama-server -m m.gguf \\\n"
        "    --spec-type a --n-max 4 --a-size 2 --n-min 1\n"
    )
    none = space.patch_unit(unit, {"spec_type": "none"})
    assert none == "[Service]\nExecStart=/usr/bin/llama-server -m m.gguf \\\n    --spec-type none\n"
    b = space.patch_unit(unit, {"spec_type": "b", "n_max": 8, "n_min": 0})
    assert "--a-size" not in b and "--n-max 8" in b and "--n-min 0" in b


def test_a_condition_must_name_parameters_of_the_space() -> None:
    bad = yaml.safe_load(yaml.safe_dump(CONDITIONAL))
    bad["params"]["n_max"]["when"] = "spec_kind != 'none'"
    with pytest.raises(ConfigError) as err:
        space_from_dict(bad, "inline")
    assert err.value.key == "params.n_max.when" and "spec_kind" in str(err.value)


def test_a_space_extends_another(tmp_path: Path) -> None:
    slots = load_space(REPO / "search_spaces" / "llamacpp-spec-slots.yaml")
    base = load_space(REPO / "search_spaces" / "llamacpp-spec.yaml")
    assert set(slots.params) == set(base.params) | {"parallel"}
    assert slots.size() == base.size() * 4
    (tmp_path / "bad.yaml").write_text("extends: nowhere.yaml\nparams: {}\n")
    with pytest.raises(ConfigError) as err:
        load_space(tmp_path / "bad.yaml")
    assert err.value.key == "extends" and "nowhere.yaml" in str(err.value)


def test_the_llamacpp_space_keeps_each_types_knobs_to_itself() -> None:
    space = load_space(REPO / "search_spaces" / "llamacpp-spec.yaml")
    configs = [c.params for c in space.enumerate()]
    assert len(configs) == 1 + 9 + 9 + 27 == space.size()
    for c in configs:
        own = {k for k in c if k != "spec_type"}
        prefix = {"none": "-", "ngram-simple": "spec_ngram_simple_",
                  "ngram-map-k": "spec_ngram_map_k_", "ngram-mod": "spec_ngram_mod_"}  # fmt: skip
        assert all(k.startswith(prefix[c["spec_type"]]) for k in own), c


# -- knobs that are not flags: a switch, an environment variable, a companion file -------
def _one(spec: dict) -> SearchSpace:
    return space_from_dict({"params": {"knob": spec}}, "space.yaml")


@pytest.mark.parametrize(
    ("spec", "key", "problem"),
    [
        ({"env": "1X", "type": "bool"}, "params.knob.env", "must be a variable name"),
        ({"env": "X", "flag": "--x", "choices": [1]}, "params.knob", "either 'flag'"),
        ({"flag": "--x", "type": "bool", "choices": [0, 1]}, "params.knob.choices", "true/false"),
        ({"flag": "--c", "type": "str", "choices": ["a"], "file": {"name": "d/x.json",
          "content": "{value}"}}, "params.knob.file.name", "file name"),
        ({"flag": "--c", "type": "str", "choices": ["a"], "file": {"name": "x.json",
          "content": "{value}", "builtin": "none"}}, "params.knob.file.builtin", "not one of"),
        ({"flag": "--c", "type": "str", "choices": ["a"], "file": {"name": "x.json"}},
         "params.knob.file.content", "the file's text"),
        ({"flag": "--c", "type": "bool", "file": {"name": "x", "content": "y"}},
         "params.knob.file", "cannot be a file"),
    ],
)  # fmt: skip
def test_bad_non_flag_knobs_name_the_key(spec: dict, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        _one(spec)
    assert f"space.yaml: {key}: " in str(err.value) and problem in str(err.value)


def test_a_switch_is_a_bare_flag_or_no_flag() -> None:
    space = _one({"flag": "--speculative-adaptive", "type": "bool"})
    unit = "[Service]\nExecStart=/bin/server --port 1\n"
    on = space.patch_unit(unit, {"knob": True})
    assert on == "[Service]\nExecStart=/bin/server --port 1 --speculative-adaptive\n"
    assert space.patch_unit(on, {"knob": False}) == unit


def test_a_companion_file_sets_its_flag_to_the_path_and_its_builtin_leaves_both_out() -> None:
    space = _one({"flag": "--cfg", "type": "str", "choices": ["default", "1,3"],
                  "file": {"name": "a.json", "content": '{"1": [{value}]}',
                           "builtin": "default"}})  # fmt: skip
    unit = "[Service]\nExecStart=/bin/server --cfg /etc/x/a.json\n"
    assert space.files({"knob": "1,3"}, "/etc/x") == {"/etc/x/a.json": '{"1": [1,3]}'}
    assert space.files({"knob": "default"}, "/etc/x") == {"/etc/x/a.json": None}
    assert space.patch_unit(unit, {"knob": "1,3"}, unit_dir="/etc/x") == unit
    assert space.patch_unit(unit, {"knob": "default"}) == "[Service]\nExecStart=/bin/server\n"
    assert space.describe({"knob": "1,3"}) == "--cfg <a.json: 1,3>"
