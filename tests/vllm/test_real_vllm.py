"""autotune against a real vLLM on this CPU: the adapter, the benchmark, refusals, a study.

These measure a real server: they run one at a time (one file, one worker), never beside
another vLLM.
"""

from __future__ import annotations

import asyncio
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
from autotune.engines.vllm import VLLMEngine, metric_samples
from autotune.run.trial import TrialPipeline, TrialResult
from tests.helpers.e2e import autotune, free_port
from tests.helpers.real_engine import TIMEOUT
from tests.vllm.conftest import Served, unit_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TIMEOUT)]

REPO = Path(__file__).resolve().parents[2]
SPACE = str(REPO / "search_spaces" / "vllm-ngram.yaml")
FLAG = "--speculative-config"


def close(measured: float, truth: float, share: float = 0.01) -> bool:
    return abs(measured - truth) <= share * max(abs(truth), 1.0)


def _config(tmp: Path, port: int, space: Any = SPACE, **study: Any) -> dict[str, Any]:
    return {
        "study": {"name": "real", "storage": f"sqlite:///{tmp / 'real.db'}", "seed": 1, **study},
        "target": {
            "engine": "vllm",
            "unit_file": "vllm.service",
            "base_url": f"http://127.0.0.1:{port}",
            "ready_timeout": 300,
        },
        "search_space": space,
        "benchmark": {
            "concurrency": [1, 4],
            "workload": "greedy",  # random weights: only greedy output repeats itself
            "max_tokens": 64,
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


def test_the_adapter_reads_what_the_live_server_runs(served: Served) -> None:
    engine = VLLMEngine()
    names = ["method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"]
    info = asyncio.run(engine.server_info(served.url, names, None))
    assert info.resolved == {"num_speculative_tokens": 3}  # three draft positions counted
    assert info.version == "0.32.0" and info.context_len == 1024
    assert info.max_total_num_tokens and info.max_total_num_tokens > 4 * 1024
    text = served.log.read_text()
    tokens, running = engine.capacity_from_log(text)
    assert (tokens, running) == (info.max_total_num_tokens, 4)
    flags = engine.launch_flags_from_log(text)
    assert flags is not None and json.loads(str(flags[FLAG])) == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }
    assert flags["--max-num-seqs"] == "4" and flags["--enforce-eager"] is True


def test_bench_counts_agree_with_the_servers_own_counters(served: Served, tmp_path: Path) -> None:
    proc = autotune(
        "bench", "--url", served.url, "--concurrency", "1,4", "--workload", "greedy",
        "--max-tokens", "64", "--min-duration", "3", "--max-duration", "5", "--ci-width", "0",
        "--json", "--engine", "vllm", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    levels = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [lv["concurrency"] for lv in levels] == [1, 4]
    for lv in levels:
        server = lv["server"]
        # Every token the client was sent (warm-up included) against vllm:generation_tokens.
        assert close(lv["sent_output_tokens"], server["output_tokens"]), lv
        assert lv["usage_source"] == "usage" and lv["errors"] == 0
        # Greedy text from random weights loops: the n-gram drafts are mostly accepted.
        assert server["accept_length"] > 2.0, server
        positions = server["acceptance_per_position"]
        assert len(positions) == 3 and positions == sorted(positions, reverse=True), positions
    after = httpx.get(served.url + "/metrics", timeout=10).text
    per_pos = metric_samples(after, "vllm:spec_decode_num_accepted_tokens_per_pos_total")
    assert sorted(labels["position"] for labels, _ in per_pos) == ["0", "1", "2"]


def _run_one(
    vllm: tuple[Path, Path], tmp_path: Path, space: dict[str, Any], config: dict[str, Any]
) -> TrialResult:
    """One trial of `config` through the real pipeline, on a fresh server."""
    python, model = vllm
    port = free_port()
    unit = tmp_path / "vllm.service"
    unit.write_text(unit_text(python, model, port))
    cfg = config_from_dict(_config(tmp_path, port, space), str(tmp_path / "x.yaml"), tmp_path)
    deployer = LocalProcessDeployer(unit, log_dir=tmp_path / "logs")
    try:
        pipeline = TrialPipeline(cfg, deployer, VLLMEngine(), unit.read_text())
        return pipeline.run(config, lambda _c: None)
    finally:
        deployer.close()


def test_a_config_vllm_refuses_is_an_infeasible_trial_with_its_line(
    vllm: tuple[Path, Path], tmp_path: Path
) -> None:
    space = {
        "engine": "vllm",
        "params": {
            "method": {"flag": FLAG, "json": "method", "type": "str", "choices": ["ngram"]},
            "num_speculative_tokens": {
                "flag": FLAG,
                "json": "num_speculative_tokens",
                "choices": [2],
            },
            "prompt_lookup_min": {"flag": FLAG, "json": "prompt_lookup_min", "choices": [3]},
            "prompt_lookup_max": {"flag": FLAG, "json": "prompt_lookup_max", "choices": [1]},
        },
    }
    config = {"method": "ngram", "num_speculative_tokens": 2}
    config |= {"prompt_lookup_min": 3, "prompt_lookup_max": 1}
    result = _run_one(vllm, tmp_path, space, config)
    assert not result.score.feasible
    assert result.attrs["failure"] == "refused", result.attrs
    assert result.attrs["reason"] == (
        "--speculative-config: prompt_lookup_min=3 must be <= prompt_lookup_max=1"
    )
    assert '--speculative-config \'{"method": "ngram"' in result.unit_text


def test_the_installed_vllm_is_asked_for_its_flags_before_a_deployment(
    vllm: tuple[Path, Path], tmp_path: Path
) -> None:
    """`--help` of the unit's own command, with its environment: the space's flag is there,
    a misspelt one is refused naming the space parameter, and nothing is started."""
    python, model = vllm
    port = free_port()
    unit = tmp_path / "vllm.service"
    unit.write_text(unit_text(python, model, port))
    deployer = LocalProcessDeployer(unit, log_dir=tmp_path / "logs")
    try:
        answer = deployer.program_output(VLLMEngine().help_args() or [])
    finally:
        deployer.close()
    assert answer.exit_code == 0, answer.text[-2000:]
    assert answer.command[-2:] == ["-m", "vllm.entrypoints.openai.api_server"]
    problems = VLLMEngine().flag_problems(answer.text, [FLAG, "--speculative-configs"])
    assert list(problems) == ["--speculative-configs"], problems
    space = yaml.safe_load(Path(SPACE).read_text())
    space.pop("extends", None)
    for param in space["params"].values():
        if param.get("flag") == FLAG:
            param["flag"] = "--speculative-configs"
    config = tmp_path / "autotune.yaml"
    config.write_text(yaml.safe_dump(_config(tmp_path, port, space, n_trials=2)))
    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert ".flag" in last and "--speculative-configs: this vLLM does not have it" in last, last
    assert "deploying" not in proc.stderr and "Traceback" not in proc.stderr


def test_text_that_is_not_json_stops_the_study_in_one_line(
    vllm: tuple[Path, Path], tmp_path: Path
) -> None:
    """A space that sets the JSON flag as plain text: every config would fail the same way."""
    python, model = vllm
    port = free_port()
    (tmp_path / "vllm.service").write_text(unit_text(python, model, port, f"{FLAG} ngram"))
    space = {
        "engine": "vllm",
        "params": {"speculation": {"flag": FLAG, "type": "str", "choices": ["ngram"]}},
    }
    config = tmp_path / "autotune.yaml"
    config.write_text(yaml.safe_dump(_config(tmp_path, port, space, n_trials=2)))
    proc = autotune("start", "--config", str(config), cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "params.speculation.flag" in last, last
    assert "--speculative-config takes a JSON object; vLLM cannot read 'ngram' as JSON" in last
    assert "Traceback" not in proc.stderr
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)  # nothing left running


def test_a_real_study_tunes_vllm_and_leaves_the_best_serving(
    vllm: tuple[Path, Path], tmp_path: Path
) -> None:
    python, model = vllm
    port = free_port()
    (tmp_path / "vllm.service").write_text(unit_text(python, model, port))
    config = tmp_path / "autotune.yaml"
    config.write_text(yaml.safe_dump(_config(tmp_path, port, n_trials=3, on_finish="apply-best")))
    pidfile = tmp_path / "real-artifacts" / f"local-process-vllm-127.0.0.1-{port}" / PIDFILE
    try:
        proc = autotune("start", "--config", str(config), cwd=tmp_path, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        study = optuna.load_study(study_name="real", storage=f"sqlite:///{tmp_path / 'real.db'}")
        trials = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        assert len(trials) == 3
        # The unit runs without --speculative-config: its own config is the `none` baseline,
        # and vLLM, drafting nothing, has no speculation counters.
        baseline = trials[0]
        assert baseline.user_attrs["baseline"] is True
        assert baseline.user_attrs["resolved"] == {"method": "none"}
        deployed = [t for t in trials if t.user_attrs.get("reused_from") is None]
        drafted = [t for t in deployed if t.user_attrs["config"]["method"] == "ngram"]
        assert drafted, [t.user_attrs["config"] for t in trials]
        for t in deployed:
            assert t.user_attrs["max_running_requests"] == 4  # --max-num-seqs
            for level in t.user_attrs["levels"]:
                assert close(level["sent_output_tokens"], level["server_output_tokens"]), level
        for t in drafted:
            # What vLLM drafts with, read back: its draft positions on /metrics.
            asked = t.user_attrs["config"]["num_speculative_tokens"]
            assert t.user_attrs["resolved"]["num_speculative_tokens"] == asked
            assert t.user_attrs["accept_length"] > 1.5, t.user_attrs
        best = autotune("best", "--json", "--config", str(config), cwd=tmp_path)
        assert best.returncode == 0, best.stderr
        chosen = json.loads(best.stdout)
        # Left serving the best config after autotune exited.
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, 0)
        url = f"http://127.0.0.1:{port}"
        metrics = httpx.get(url + "/metrics", timeout=10).text
        positions = metric_samples(metrics, "vllm:spec_decode_num_accepted_tokens_per_pos_total")
        want = chosen["resolved"].get("num_speculative_tokens", 0)
        assert len(positions) == want, (chosen, len(positions))

        # The per-level winners as vLLM's per-batch-size schedule, deployed and measured.
        export = autotune("export-adaptive", "--measure", "--config", str(config), cwd=tmp_path)
        assert export.returncode == 0, export.stderr[-3000:]
        written = json.loads((tmp_path / "real-schedule.json").read_text())
        ranges = written["num_speculative_tokens_per_batch_size"]
        assert ranges[0][0] == 1 and ranges[-1][1] == 4, ranges
        assert written["num_speculative_tokens"] == max(k for _, _, k in ranges)
        study = optuna.load_study(study_name="real", storage=f"sqlite:///{tmp_path / 'real.db'}")
        probe = study.user_attrs["adaptive_probes"]["exported"]
        assert probe["feasible"] is True, probe  # vLLM took the schedule and served it
        assert set(probe["levels"]) == {"1", "4"}
        assert "num_speculative_tokens_per_batch_size" in probe["unit"]
        # And the best config serves again afterwards, as a finished study leaves it.
        metrics = httpx.get(url + "/metrics", timeout=10).text
        positions = metric_samples(metrics, "vllm:spec_decode_num_accepted_tokens_per_pos_total")
        assert len(positions) == want
    finally:
        LocalProcessDeployer(
            pidfile.parent / "unused.service", log_dir=pidfile.parent
        ).stop_leftover()
