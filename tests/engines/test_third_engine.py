"""A third engine, registered from the test suite, through init, validate and a short start.

The point is what it does not touch: the engine is one class here and one `register`
call; no shared module learns its name. Its server is a stand-in that speaks its own
flag (`--draft-depth`) and serves through the simulator.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import optuna
import pytest
import yaml

from autotune import cli, engines
from autotune.deploy import ports
from autotune.engines import Counters, Failure, ServerInfo, get_json
from tests.helpers.e2e import REPO, free_port

READY = "The server is fired up and ready to roll!"

STAND_IN = '''\
"""toyserve: a speculative server with one knob, --draft-depth (a chain of that many)."""
import sys

from autotune.sim.cli import main

out, args = [], iter(sys.argv[1:])
for arg in args:
    if arg == "--draft-depth":
        k = next(args)
        out += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", k,
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(int(k) + 1)]
    else:
        out.append(arg)
sys.exit(main(out))
'''

SPACE = {
    "engine": "toy",
    "params": {"draft_depth": {"flag": "--draft-depth", "type": "int", "low": 1, "high": 3}},
}


class ToyEngine:
    name = "toy"
    algorithm_flag = "--draft-depth"
    default_port = 31000
    default_host = "127.0.0.1"
    launch_hint = "toyserve (toyserve.py)"
    init_constraints: tuple[tuple[str, int], ...] = ()
    concurrency_flags: tuple[str, ...] = ()

    def __init__(self, space: Path) -> None:
        self.space = space

    def launched_by(self, argv: list[str]) -> bool:
        return any(Path(a).name == "toyserve.py" for a in argv[:3])

    def default_space(self, flags: dict[str, str | None]) -> tuple[str, str]:
        return str(self.space), "the toy's one knob"

    def time_scale(self, argv: list[str]) -> float:
        return 1.0

    def load_seconds(self, argv: list[str]) -> float | None:
        return None

    def ready_paths(self) -> tuple[str, ...]:
        return ("/health",)

    def ready_in_log(self, log_text: str) -> bool:
        return READY in log_text

    async def server_info(self, base_url: str, params: list[str], api_key: str | None) -> Any:
        async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
            data = await get_json(client, "/server_info")
        resolved = {"draft_depth": data["speculative_num_steps"]} if "draft_depth" in params else {}
        return ServerInfo(resolved, data["max_running_requests"], None, raw=data)

    async def counters(self, base_url: str, api_key: str | None) -> Counters | None:
        return None

    async def flush_cache(self, base_url: str, api_key: str | None) -> str:
        return "not flushed: this engine keeps no cache autotune can empty"

    def launch_flags_from_log(self, log_text: str) -> dict[str, str | bool] | None:
        return None

    def capacity_from_log(self, log_text: str) -> tuple[int | None, int | None]:
        return None, None

    def accept_length_from_log(self, log_text: str) -> float | None:
        return None

    def tier_switches(self, log_text: str) -> list[tuple[float | None, int, int]]:
        return []

    def classify_failure(self, log_text: str, exit_code: int | None) -> Failure:
        last = log_text.strip().splitlines()[-1:] or ["no log"]
        return Failure("crash_on_start", last[0])

    def runs(self, asked: dict[str, Any]) -> dict[str, Any]:
        return dict(asked)

    def help_args(self) -> list[str] | None:
        return None

    def flag_problems(self, help_text: str, flags: list[str]) -> dict[str, str]:
        return {}

    def request_failure(self, log_text: str) -> Failure | None:
        return None


@pytest.mark.slow  # an end-to-end run: not in make test-fast
def test_a_registered_engine_runs_init_validate_and_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    space = tmp_path / "toy-space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    # The registry as it was comes back after the test (other tests list the known engines).
    monkeypatch.setattr(engines, "_FACTORIES", dict(engines._FACTORIES))
    monkeypatch.setattr(engines, "_ALIASES", dict(engines._ALIASES))
    engines.register("toy", lambda: ToyEngine(space))
    server = tmp_path / "toyserve.py"
    server.write_text(STAND_IN)
    port = free_port()
    unit = tmp_path / "toy.service"
    unit.write_text(
        textwrap.dedent(f"""\
            [Service]
            Environment=PYTHONPATH={REPO}
            ExecStart={sys.executable} {server} --host 127.0.0.1 --port {port} \\
                --draft-depth 2 --sim-load-time 0.2
            """)
    )
    out = tmp_path / "study"
    assert cli.main(["init", "--unit-file", str(unit), "--out", str(out)]) == 0
    config_path = out / "autotune.yaml"
    config = yaml.safe_load(config_path.read_text())
    assert config["target"]["engine"] == "toy"
    assert config["target"]["base_url"] == f"http://127.0.0.1:{port}"
    assert config["search_space"] == str(space)
    assert "constraints" not in config["objective"]
    # A short night: two levels, short windows, no finalists.
    config["benchmark"].update(concurrency=[1, 4], max_tokens=64, min_duration=0.5,
                               max_duration=1.0, ci_width=None, warmup_requests=1,
                               finalists=0)  # fmt: skip
    config["target"]["ready_timeout"] = 60
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert cli.main(["validate", "--config", str(config_path)]) == 0
    try:
        assert cli.main(["start", "--config", str(config_path), "--n-trials", "2"]) == 0
        # init wrote on_finish: apply-best: the winner still serves after autotune exits.
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    finally:
        for holder in ports.holders(port):
            if holder.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(holder.pid, signal.SIGKILL)
    # `init` wrote sqlite:///autotune.db: beside the config.
    storage = f"sqlite:///{out / 'autotune.db'}"
    study = optuna.load_study(study_name=config["study"]["name"], storage=storage)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 2
    # The first trial is the unit as it is (depth 2): the server said what it runs.
    assert done[0].user_attrs["resolved"]["draft_depth"] == 2
    assert all(t.user_attrs["output_tok_s@c1"] > 0 for t in done)
