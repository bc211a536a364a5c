"""A knob that is one field of a flag's JSON value (vLLM's `--speculative-config`).

The fields of one flag compose one JSON object in the unit; a field that does not apply
is not in it; the field's `builtin` value leaves the whole flag out. Identity, rules and
`when` are the flag knobs' own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.search.study import baseline_of
from autotune.space import load_space, space_from_dict
from autotune.unit import reach, unitfile, verify

REPO = Path(__file__).resolve().parents[2]
NGRAM = REPO / "search_spaces" / "vllm-ngram.yaml"
UNIT = """[Unit]
Description=vLLM

[Service]
ExecStart=/opt/vllm/bin/python -m vllm.entrypoints.openai.api_server \\
    --model /srv/model --port 8000
Restart=no
"""
FLAG = "--speculative-config"


def _argv_flags(unit: str) -> dict[str, str | None]:
    return unitfile.flags(unitfile.parse_exec_start(unit).argv)


def test_the_fields_compose_one_json_value_in_the_unit() -> None:
    space = load_space(NGRAM)
    config = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    config["prompt_lookup_min"] = 2
    assert space.check(config) is None
    patched = space.patch_unit(UNIT, config)
    value = _argv_flags(patched)[FLAG]
    assert value is not None and json.loads(value) == config
    # As vLLM's docs write it: single quotes around the JSON, one word for systemd.
    assert '--speculative-config \'{"method": "ngram"' in patched
    assert verify.verify_unit(patched, "vllm.service", check_executables=False) == []


def test_a_field_that_does_not_apply_is_not_in_the_json() -> None:
    space = space_from_dict(
        {
            "params": {
                "method": {"flag": FLAG, "json": "method", "type": "str", "choices": ["a", "b"]},
                "only_b": {
                    "flag": FLAG,
                    "json": "x",
                    "type": "int",
                    "choices": [1, 2],
                    "when": "method == 'b'",
                },
            }
        },
        "inline.yaml",
    )
    assert space.flags({"method": "a"}) == {FLAG: '{"method": "a"}'}
    assert json.loads(space.flags({"method": "b", "only_b": 2})[FLAG]) == {"method": "b", "x": 2}
    assert space.size() == 3  # a, (b, 1), (b, 2): the field of b does not multiply a


def test_the_builtin_value_leaves_the_flag_out() -> None:
    space = load_space(NGRAM)
    with_flag = space.patch_unit(UNIT, space.enumerate()[-1].params)
    assert FLAG in _argv_flags(with_flag)
    off = space.patch_unit(with_flag, {"method": "none"})
    assert off == UNIT  # every other byte as it was
    assert space.describe({"method": "none"}) == f"no {FLAG}"
    assert space.removed_flags({"method": "none"}) == [FLAG]


def test_identity_is_per_field_and_the_space_is_small() -> None:
    space = load_space(NGRAM)
    configs = [c.params for c in space.enumerate()]
    assert configs[0] == {"method": "none"}
    keys = {space.key(c) for c in configs}
    assert len(keys) == len(configs)
    for c in configs[1:]:
        assert c["prompt_lookup_min"] <= c["prompt_lookup_max"]
        assert space.decode(space.encode(c)) == c


def test_the_units_own_json_is_the_baseline() -> None:
    space = load_space(NGRAM)
    config = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}
    config["prompt_lookup_min"] = 1
    unit = space.patch_unit(UNIT, config)
    baseline = baseline_of(space, _argv_flags(unit))
    assert baseline.params is not None and space.decode(baseline.params) == config
    # No flag: vLLM runs without speculation, which is the space's `none`.
    assert space.decode(baseline_of(space, _argv_flags(UNIT)).params or {}) == {"method": "none"}
    # A value the space cannot say (no JSON, a missing field): the unit runs as is.
    broken = unit.replace('"prompt_lookup_min": 1', '"other": 1')
    assert baseline_of(space, _argv_flags(broken)).params is None


def test_a_json_value_reaches_the_server_whatever_its_spacing() -> None:
    assert reach.same('{"a": 1, "b": "x"}', '{"b":"x","a":1.0}')
    assert not reach.same('{"a": 1}', '{"a": 2}')
    assert not reach.same('{"a": 1}', '{"a": 1, "b": 2}')


@pytest.mark.parametrize(
    ("params", "key", "problem"),
    [
        (
            {
                "a": {"flag": FLAG, "json": "k", "choices": [1]},
                "b": {"flag": FLAG, "json": "k", "choices": [2]},
            },
            "params.b.json.key",
            "field 'k' is already set by a",
        ),
        (
            {"a": {"flag": FLAG, "json": "k", "choices": [1]}, "b": {"flag": FLAG, "choices": [2]}},
            "params.b.flag",
            "is a JSON flag here",
        ),
        (
            {"a": {"flag": FLAG, "json": {"key": "m", "builtin": "off"}, "choices": [1]}},
            "params.a.json.builtin",
            "'off' is not one of the parameter's choices",
        ),
        ({"a": {"flag": FLAG, "json": {"key": ""}, "choices": [1]}}, "params.a.json.key", "name"),
        ({"a": {"flag": FLAG, "json": {"nope": 1}, "choices": [1]}}, "params.a.json.nope", "unkno"),
        ({"a": {"env": "X", "json": "k", "choices": [1]}}, "params.a.json", "not with env"),
    ],
)
def test_a_bad_json_knob_is_one_line_naming_it(params: dict, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        space_from_dict({"params": params}, "bad.yaml")
    line = str(err.value)
    assert line.startswith(f"bad.yaml: {key}"), line
    assert problem in line and "\n" not in line


def test_a_unit_json_value_of_the_wrong_type_runs_the_unit_as_is() -> None:
    space = load_space(NGRAM)
    for bad in ('"abc"', "3.5", "true", "null"):
        unit = UNIT.replace(
            "--port 8000",
            '--port 8000 --speculative-config \'{"method": "ngram", "num_speculative_tokens": '
            + bad
            + ', "prompt_lookup_max": 3, "prompt_lookup_min": 1}\'',
        )
        assert baseline_of(space, _argv_flags(unit)).params is None, bad
