"""autotune against a real llama-server: the benchmark, failures, and a whole study.

These measure a real server on this CPU: they run one at a time (pytest runs
tests in sequence), never beside another CPU-heavy test.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import optuna
import pytest
import yaml

from autotune.config import config_from_dict
from autotune.deploy.local_process import PIDFILE, LocalProcessDeployer
from autotune.engines.llamacpp import LlamaCppEngine
from autotune.errors import StudyStopped
from autotune.run.trial import TrialPipeline, TrialResult
from tests.helpers.e2e import autotune, free_port, status
from tests.helpers.real_engine import TIMEOUT
from tests.llamacpp.conftest import unit_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TIMEOUT)]

SPACE = str(Path(__file__).resolve().parents[2] / "search_spaces" / "llamacpp-spec.yaml")


def close(measured: float, truth: float, share: float = 0.02) -> bool:
    return abs(measured - truth) <= share * max(abs(truth), 1.0)


def test_bench_counts_agree_with_the_servers_own_counters(running_server: str) -> None:
    proc = autotune(
        "bench", "--url", running_server, "--engine", "llama.cpp", "--json",
        "--concurrency", "1,4", "--workload", "copy", "--max-tokens", "48",
        "--min-duration", "3", "--max-duration", "6", "--ci-width", "0.2",
        cwd=Path.cwd(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    levels = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [lv["concurrency"] for lv in levels] == [1, 4]
    for lv in levels:
        server = lv["server"]
        # Every token the client was sent (warmup included) against /metrics.
        assert close(lv["sent_output_tokens"], server["output_tokens"]), lv
        # The requests' own `timings` against the server's speculation counters.
        assert server["draft_tokens"] > 0, "ngram-simple drafted nothing on copy prompts"
        assert close(lv["draft_tokens"], server["draft_tokens"]), lv
        assert close(lv["draft_accepted"], server["accepted_tokens"]), lv
        assert lv["usage_source"] == "usage" and lv["errors"] == 0


def _config(tmp: Path, port: int, space: Any = SPACE, **study: Any) -> dict[str, Any]:
    return {
        "study": {"name": "real", "storage": f"sqlite:///{tmp / 'real.db'}", "seed": 2, **study},
        "target": {
            "engine": "llama.cpp",
            "unit_file": "llama.service",
            "base_url": f"http://127.0.0.1:{port}",
            "ready_timeout": 60,
        },
        "search_space": space,
        "benchmark": {
            "concurrency": [1, 4],
            "workload": "copy",
            "max_tokens": 48,
            # 2-s windows, no confidence target: these count what the server counted, which
            # needs no narrower interval (the model's tests set their own windows).
            "min_duration": 2.0,
            "max_duration": 2.0,
            "ci_width": None,
            "finalists": 0,
        },
        "objective": {
            "constraints": {"min_running_requests": 4, "max_degenerate_share": None},
        },
    }


def _run_one(
    llama: tuple[Path, Path],
    tmp_path: Path,
    space: dict[str, Any],
    config: dict[str, Any],
    workload: str = "copy",
) -> TrialResult:
    """One trial of `config` through the real pipeline, on a fresh server."""
    binary, model = llama
    port = free_port()
    unit = tmp_path / "llama.service"
    unit.write_text(unit_text(binary, model, port))
    data = _config(tmp_path, port, space)
    data["benchmark"]["workload"] = workload
    cfg = config_from_dict(data, str(tmp_path / "x.yaml"), tmp_path)
    deployer = LocalProcessDeployer(unit, log_dir=tmp_path / "logs")
    try:
        pipeline = TrialPipeline(cfg, deployer, LlamaCppEngine(), unit.read_text())
        return pipeline.run(config, lambda _c: None)
    finally:
        deployer.close()


def test_a_flag_combination_the_server_refuses_is_an_infeasible_trial(
    llama: tuple[Path, Path], tmp_path: Path
) -> None:
    # Synthetic acceptance (a benchmarking mode) needs a length of at least 1 token.
    space = {
        "engine": "llama.cpp",
        "params": {
            "spec_type": {"flag": "--spec-type", "type": "str", "choices": ["ngram-mod"]},
            "spec_synth_len": {"flag": "--spec-synth-len", "type": "float", "choices": [0.5]},
        },
    }
    result = _run_one(llama, tmp_path, space, {"spec_type": "ngram-mod", "spec_synth_len": 0.5})
    assert not result.score.feasible
    assert result.attrs["failure"] == "refused"
    assert "synthetic acceptance length must be finite and within [1," in result.attrs["reason"]
    assert "--spec-synth-len 0.5" in result.unit_text


def test_a_flag_this_build_does_not_have_stops_the_study_in_one_line(
    llama: tuple[Path, Path], tmp_path: Path
) -> None:
    binary, model = llama
    port = free_port()
    # The unit has every flag of the space, so its baseline runs them as the space's knobs.
    (tmp_path / "llama.service").write_text(
        unit_text(binary, model, port, "--spec-type ngram-mod --draft-max 4")
    )
    space = {
        "engine": "llama.cpp",
        "params": {
            "spec_type": {"flag": "--spec-type", "type": "str", "choices": ["ngram-mod"]},
            "draft_max": {"flag": "--draft-max", "type": "int", "choices": [4, 8]},
        },
    }
    config = tmp_path / "autotune.yaml"
    config.write_text(yaml.safe_dump(_config(tmp_path, port, space, n_trials=3)))
    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    # Asked of `llama-server --help` before anything is deployed.
    assert "params.draft_max.flag" in last and "--draft-max" in last, last
    assert "no longer accepts" in last and "deploying" not in proc.stderr, last
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)  # nothing left running


def test_a_flag_the_server_refuses_at_start_stops_the_study_naming_the_parameter(
    llama: tuple[Path, Path], tmp_path: Path
) -> None:
    """The same flag, met by a trial (a host where --help could not be asked)."""
    space = {
        "engine": "llama.cpp",
        "params": {"draft_max": {"flag": "--draft-max", "type": "int", "choices": [4]}},
    }
    with pytest.raises(StudyStopped) as stopped:
        _run_one(llama, tmp_path, space, {"draft_max": 4})
    assert stopped.value.key == "params.draft_max.flag"
    assert "no longer accepts --draft-max" in stopped.value.problem


def test_a_real_study_ends_feasible_with_the_best_config_serving(
    llama: tuple[Path, Path], tmp_path: Path
) -> None:
    binary, model = llama
    port = free_port()
    (tmp_path / "llama.service").write_text(unit_text(binary, model, port))
    config = tmp_path / "autotune.yaml"
    config.write_text(yaml.safe_dump(_config(tmp_path, port, n_trials=4, on_finish="apply-best")))
    pidfile = tmp_path / "real-artifacts" / f"local-process-llama-127.0.0.1-{port}" / PIDFILE
    try:
        proc = autotune("start", "--config", str(config), cwd=tmp_path, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        study = optuna.load_study(study_name="real", storage=f"sqlite:///{tmp_path / 'real.db'}")
        # A pruned trial (stopped after a level it could not win from) was deployed too.
        finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        trials = [t for t in study.trials if t.state in finished]
        deployed = [t for t in trials if t.user_attrs.get("reused_from") is None]
        assert len(deployed) >= 4  # every trial asked for was deployed
        assert trials[0].user_attrs["baseline"] is True
        assert trials[0].user_attrs["resolved"]["spec_type"] == "none"
        for t in deployed:
            assert t.user_attrs["max_running_requests"] == 4  # the server's slots
            for level in t.user_attrs["levels"]:
                # The client's count of every token it was sent against the server's.
                assert close(level["sent_output_tokens"], level["server_output_tokens"])
                if level.get("server_draft_acceptance") is not None:
                    assert level["draft_acceptance"] == pytest.approx(
                        level["server_draft_acceptance"], abs=0.02
                    )
        best = autotune("best", "--json", "--config", str(config), cwd=tmp_path)
        assert best.returncode == 0, best.stderr
        chosen = json.loads(best.stdout)
        assert chosen["value"] > 0
        # Left serving the best config after autotune exited.
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, 0)
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(url + "/health", timeout=5).status_code == 200
        spec = chosen["resolved"]["spec_type"]
        slots = httpx.get(url + "/slots", timeout=5).json()
        assert slots[0]["speculative"] is (spec != "none")
    finally:
        _stop(pidfile)


def _stop(pidfile: Path) -> None:
    """Stop the server the study left serving, as the next `autotune start` would."""
    LocalProcessDeployer(pidfile.parent / "unused.service", log_dir=pidfile.parent).stop_leftover()


def test_requests_that_do_not_fit_a_slots_context_make_the_config_infeasible(
    llama: tuple[Path, Path], tmp_path: Path
) -> None:
    # 1024 tokens over 4 slots: 256 each (llama.cpp pads slots to 256), and prompts of
    # about 600 tokens.
    space = {
        "engine": "llama.cpp",
        "params": {"ctx_size": {"flag": "--ctx-size", "type": "int", "choices": [1024]}},
    }
    result = _run_one(llama, tmp_path, space, {"ctx_size": 1024}, workload="random:600")
    assert not result.score.feasible
    assert result.attrs["failure"] == "context_too_small", result.attrs
    assert "exceeds the available context size" in result.attrs["reason"]
    assert result.score.constraints["server_up"] == 0  # it served; the workload did not fit


def test_a_model_that_does_not_load_stops_the_study_in_one_line(
    llama: tuple[Path, Path], tmp_path: Path
) -> None:
    binary, _ = llama
    port = free_port()
    missing = tmp_path / "no-such-model.gguf"
    (tmp_path / "llama.service").write_text(unit_text(binary, missing, port))
    config = tmp_path / "autotune.yaml"
    # apply-best: at the end the original unit is tried again, and fails the same way.
    config.write_text(yaml.safe_dump(_config(tmp_path, port, n_trials=3, on_finish="apply-best")))
    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr[-2000:]  # the host's failure, not the config's
    last = proc.stderr.strip().splitlines()[-1]
    assert f"the model file {missing} cannot be opened" in last and "[model_missing]" in last
    assert "check that the unit's model path exists" in last, last
    trials = status(config)["trials"]
    assert not [t for t in trials if t["feasible"] is False]  # nothing recorded infeasible


def test_a_study_on_open_loop_rates_reports_goodput_per_rate(
    llama: tuple[Path, Path], tmp_path: Path
) -> None:
    binary, model = llama
    port = free_port()
    (tmp_path / "llama.service").write_text(unit_text(binary, model, port))
    data = _config(tmp_path, port, n_trials=1)  # the unit as it is: the rates are the point
    data["benchmark"].update(request_rate=[0.25, 4], rate_duration=6)
    data["objective"].update(mode="max_rate", slo={"ttft_ms": 3000, "tpot_ms": 250})
    config = tmp_path / "autotune.yaml"
    config.write_text(yaml.safe_dump(data))
    proc = autotune("start", "--config", str(config), cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = optuna.load_study(study_name="real", storage=f"sqlite:///{tmp_path / 'real.db'}")
    measured = [t for t in study.trials if t.user_attrs.get("rates")]
    assert measured, "no trial measured its rates"
    for t in measured:
        rates = {r["rate"]: r for r in t.user_attrs["rates"]}
        # One request every four seconds is served well within the SLOs; four a second
        # is more than four CPU slots finish (each takes about two seconds here).
        assert rates[0.25]["meets_slo"] and rates[0.25]["queued_max"] == 0, rates[0.25]
        assert not rates[4.0]["meets_slo"] and rates[4.0]["queued_max"] > 0, rates[4.0]
        assert t.value == max(r for r, x in rates.items() if x["meets_slo"])
    report = autotune("report", "--config", str(config), cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    html = (tmp_path / "real-report.html").read_text()
    assert "Goodput per rate" in html and "0.25/s" in html
