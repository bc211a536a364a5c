"""Flag parsing: SGLang's flags as a unit file spells them, and the simulator's own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from autotune.sim import cli
from autotune.sim.args import ArgError, Fault, parse


def test_value_flags_both_spellings() -> None:
    a = parse(
        [
            "--model-path", "/models/x", "--port=31000", "--speculative-algorithm", "eagle",
            "--speculative-num-steps=3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens=4", "--max-running-requests", "16",
            "--mem-fraction-static=0.8", "--cuda-graph-max-bs-decode", "32", "--api-key=k",
            "--host", "0.0.0.0",
        ]
    )  # fmt: skip
    la = a.launch
    assert a.model_path == "/models/x" and a.port == 31000 and a.host == "0.0.0.0"
    assert la.speculative_algorithm == "EAGLE"
    assert (la.speculative_num_steps, la.speculative_eagle_topk) == (3, 1)
    assert la.speculative_num_draft_tokens == 4
    assert la.max_running_requests == 16 and la.mem_fraction_static == 0.8
    assert la.cuda_graph_max_bs == 32 and a.api_key == "k"
    assert a.ignored == ()


def test_unknown_flags_are_collected_and_booleans_take_no_value() -> None:
    a = parse(
        [
            "--tp", "4", "--trust-remote-code", "--context-length", "262144",
            "--page-size=1", "--attention-backend", "fa3", "--enable-metrics",
            "--disable-radix-cache", "--speculative-num-steps", "2",
        ]
    )  # fmt: skip
    assert a.ignored == (
        "--tp", "--trust-remote-code", "--context-length", "--page-size",
        "--attention-backend", "--disable-radix-cache",
    )  # fmt: skip
    assert a.enable_metrics is True
    # --disable-radix-cache is followed by a flag, so it did not swallow it.
    assert a.launch.speculative_num_steps == 2


def test_unknown_flag_value_may_be_negative() -> None:
    a = parse(["--random-seed", "-1", "--port", "5"])
    assert a.ignored == ("--random-seed",) and a.port == 5


def test_sim_flags() -> None:
    a = parse(
        ["--sim-load-time", "95", "--sim-noise=0", "--sim-seed", "3", "--sim-profile", "llama",
         "--sim-fault", "crash-after:5"]
    )  # fmt: skip
    assert a.sim.load_time == 95 and a.sim.noise == 0 and a.sim.seed == 3
    assert a.sim.profile == "llama3.1-8b-eagle3-h100"
    assert a.sim.fault == Fault("crash-after", 5)


@pytest.mark.parametrize(
    "fault, expected",
    [
        ("crash-on-start", Fault("crash-on-start")),
        ("hang-on-start", Fault("hang-on-start")),
        ("crash-after:0", Fault("crash-after", 0)),
        ("slow-start:2.5", Fault("slow-start", 2.5)),
        ("crash-once-after:3:/tmp/m", Fault("crash-once-after", 3, "/tmp/m")),
    ],
)
def test_faults(fault: str, expected: Fault) -> None:
    assert parse(["--sim-fault", fault]).sim.fault == expected


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--sim-fault", "explode"], "--sim-fault"),
        (["--sim-fault", "crash-after:x"], "--sim-fault"),
        (["--sim-fault", "crash-once-after:3"], "crash-once-after:N:MARKER"),
        (["--sim-fault", "crash-once-after:3:/no/such/dir/m"], "no folder for marker"),
        (["--sim-noise", "2"], "--sim-noise"),
        (["--sim-load-time", "-1"], "--sim-load-time"),
        (["--sim-profile", "nope"], "unknown profile"),
        (["--sim-bogus", "1"], "unknown simulator flag"),
        (["--speculative-num-steps", "three"], "invalid int"),
        (["--mem-fraction-static", "1.5"], "between 0 and 1"),
        (["--port"], "expected one argument"),
        (["stray"], "unrecognized"),
        (["--concurrency", "1,16"], "need --predict"),
    ],
)
def test_bad_values(argv: list[str], words: str) -> None:
    with pytest.raises(ArgError, match=words):
        parse(argv)


def test_bad_sim_flag_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--sim-noise", "abc"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--sim-noise" in err


def test_module_entry_point_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "autotune.sim", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--sim-fault" in out and "--predict" in out
