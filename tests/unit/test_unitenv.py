"""Environment= variables of a unit set and removed with every other byte unchanged, and
`systemd-analyze verify` clean on the result (warnings count as failures)."""

from __future__ import annotations

import shutil

import pytest

from autotune.errors import ConfigError
from autotune.space import space_from_dict
from autotune.unit import unitenv
from autotune.unit.verify import verify_unit

UNIT = """[Unit]
Description=SGLang

[Service]
Environment=PYTHONUNBUFFERED=1 "HF_HOME=/srv/hf cache"
# a comment that must stay
Environment=NCCL_DEBUG=WARN
ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path m \\
    --speculative-algorithm EAGLE --speculative-num-steps 3
Restart=always

[Install]
WantedBy=multi-user.target
"""


def test_a_new_variable_gets_a_line_after_the_last_environment() -> None:
    out = unitenv.patch_environment(UNIT, {"SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK": "1"})
    assert out == UNIT.replace(
        "Environment=NCCL_DEBUG=WARN\n",
        "Environment=NCCL_DEBUG=WARN\nEnvironment=SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1\n",
    )
    assert unitenv.effective(out)["SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK"] == "1"
    # Idempotent, and setting it back changes one word.
    assert unitenv.patch_environment(out, {"SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK": "1"}) == out
    again = unitenv.patch_environment(out, {"SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK": "0"})
    assert again == out.replace("SKIP_DECODE_LOCK=1", "SKIP_DECODE_LOCK=0")


def test_a_variable_in_a_shared_line_changes_alone_and_removal_restores_the_bytes() -> None:
    out = unitenv.patch_environment(UNIT, {"HF_HOME": "/data/hf"})
    assert "Environment=PYTHONUNBUFFERED=1 HF_HOME=/data/hf\n" in out
    assert out.replace("HF_HOME=/data/hf", '"HF_HOME=/srv/hf cache"') == UNIT
    added = unitenv.patch_environment(UNIT, {"SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK": "1"})
    assert unitenv.patch_environment(added, {}, ["SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK"]) == UNIT
    gone = unitenv.patch_environment(UNIT, {}, ["PYTHONUNBUFFERED"])
    assert gone == UNIT.replace('Environment=PYTHONUNBUFFERED=1 "HF', 'Environment="HF')
    assert unitenv.patch_environment(UNIT, {}, ["NCCL_DEBUG"]) == UNIT.replace(
        "Environment=NCCL_DEBUG=WARN\n", ""
    )


def test_values_are_quoted_for_systemd_and_specifiers_escaped() -> None:
    out = unitenv.patch_environment(UNIT, {"X": 'a b "c" 100%'})
    assert unitenv.effective(out)["X"] == 'a b "c" 100%'  # written as %%, a literal %
    assert 'Environment="X=a b \\"c\\" 100%%"' in out


def test_without_environment_the_line_goes_before_execstart_and_crlf_stays() -> None:
    unit = "[Service]\r\nType=simple\r\nExecStart=/bin/true --x 1\r\n"
    out = unitenv.patch_environment(unit, {"A": "1"})
    assert out == "[Service]\r\nType=simple\r\nEnvironment=A=1\r\nExecStart=/bin/true --x 1\r\n"


def test_an_empty_environment_resets_and_only_later_assignments_count() -> None:
    unit = "[Service]\nEnvironment=A=1\nEnvironment=\nEnvironment=B=2\nExecStart=/bin/true\n"
    assert unitenv.effective(unit) == {"B": "2"}
    out = unitenv.patch_environment(unit, {"A": "3"})
    assert unitenv.effective(out) == {"B": "2", "A": "3"}
    assert out.startswith("[Service]\nEnvironment=A=1\nEnvironment=\n")


def test_bad_names_are_refused() -> None:
    with pytest.raises(ConfigError, match="not a variable name"):
        unitenv.patch_environment(UNIT, {"1BAD": "x"})


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_patched_units_verify_clean() -> None:
    space = space_from_dict(
        {
            "params": {
                "skip_decode_lock": {"env": "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK", "type": "bool"},
                "steps": {"flag": "--speculative-num-steps", "low": 1, "high": 2},
            }
        },
        "inline",
    )
    unit = UNIT.replace("/usr/bin/python3", "/bin/true")
    for c in space.enumerate():
        patched = space.patch_unit(unit, c.params)
        assert verify_unit(patched, "sglang.service") == []
        assert unitenv.effective(patched)["SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK"] == (
            "1" if c.params["skip_decode_lock"] else "0"
        )
