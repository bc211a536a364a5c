"""A fleet's next host, through the real command line over real SSH (sshd on 127.0.0.1, the
stand-in systemd, the real simulator): `apply --check --worker NAME` deploys the study's
winner there, measures it once and says whether it holds; both outcomes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.run.host_check import DOES_NOT_HOLD
from autotune.search import records
from autotune.unit import unitfile
from tests.deploy.conftest import SshRig
from tests.helpers.e2e import autotune, free_port, sim_unit
from tests.helpers.fake_systemd_host import FakeSystemdHost

pytestmark = pytest.mark.slow

#: No start-to-start noise and one seed: the same profile gives the same server, so "holds"
#: rests on the windows alone; another profile (another model on other GPUs) is the host
#: that is not like the others.
SAME = "--sim-load-time 0.2 --sim-noise 0 --sim-seed 3"
OTHER = f"{SAME} --sim-profile llama3.1-8b-eagle3-h100"
START = "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"


def _fleet(tmp: Path, rig: SshRig, host: FakeSystemdHost, workers: dict[str, str]) -> Path:
    """A config whose workers are units of one stand-in host, each its own port."""
    entries: list[dict[str, Any]] = []
    for name, sim_flags in workers.items():
        port = free_port()
        unit = f"sim-{name}.service"
        host.install(unit, sim_unit(port, START, sim_flags))
        entries.append(
            {
                "name": name,
                "base_url": f"http://127.0.0.1:{port}",
                "unit": unit,
                "unit_file": str(host.unit_path(unit)),
            }
        )
    config = {
        "study": {
            "name": "fleet",
            "storage": f"sqlite:///{tmp / 'fleet.db'}",
            "n_trials": 2,
            "seed": 1,
            "startup_trials": 2,
        },
        "target": {
            "deploy": "ssh",
            "ready_timeout": 60,
            "ssh": rig.target_ssh(),
            "systemd": {
                "lock_file": str(host.root / "autotune.lock"),
                "systemctl": host.systemctl,
                "journalctl": host.journalctl,
            },
        },
        "workers": entries,
        "search_space": "sglang-mtp.yaml",
        "benchmark": {
            "concurrency": [4],
            "max_tokens": 64,
            "min_duration": 3.0,
            "max_duration": 5.0,
            "warmup_requests": 4,
            "finalists": 0,
        },
        "objective": {"mode": "single", "level": 4},
    }
    path = tmp / "autotune.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _checks(config: Path) -> dict[str, Any]:
    study = optuna.load_study(study_name="fleet", storage=f"sqlite:///{config.parent / 'fleet.db'}")
    return dict(study.user_attrs[records.STUDY_HOST_CHECKS])


def test_the_winner_holds_on_a_host_like_the_first_and_not_on_another(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    config = _fleet(world_dir, ssh_rig, fake_host, {"gpu1": SAME, "gpu2": SAME, "gpu3": OTHER})
    tuned = autotune(
        "start", "--worker", "gpu1", "--config", str(config), cwd=world_dir, timeout=300
    )
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    best = json.loads(autotune("best", "--json", "--config", str(config), cwd=world_dir).stdout)

    # A host like the one the study ran on: the winner is deployed there and holds.
    same = autotune(
        "apply", "--check", "--worker", "gpu2", "--config", str(config), cwd=world_dir, timeout=300
    )
    assert same.returncode == 0, same.stdout + same.stderr[-3000:]
    first, second = same.stdout.strip().splitlines()[-2:]
    assert first.startswith(f"gpu2: trial {best['trial']}'s config holds here:"), first
    assert "measured on gpu1" in first
    assert second.startswith(f"serving trial {best['trial']}'s config on gpu2 at "), second
    served = unitfile.parse_exec_start(fake_host.unit_path("sim-gpu2.service").read_text())
    flags = served.flags()
    assert int(flags["--speculative-num-steps"]) == best["resolved"]["speculative_num_steps"]

    # Another model on other GPUs: measured, said not to hold (exit 3), the way to tune it
    # offered, and the winner left serving.
    other = autotune(
        "apply", "--check", "--worker", "gpu3", "--config", str(config), cwd=world_dir, timeout=300
    )
    assert other.returncode == DOES_NOT_HOLD, other.stdout + other.stderr[-3000:]
    verdict = other.stdout.strip().splitlines()[-2]
    assert verdict.startswith(f"gpu3: trial {best['trial']}'s config does not hold here:")
    assert "autotune start --worker gpu3 --study fleet-gpu3 --from fleet" in verdict
    assert other.stdout.strip().splitlines()[-1].startswith("serving trial ")

    checks = _checks(config)
    assert checks["gpu2"]["holds"] is True and checks["gpu3"]["holds"] is False
    here, earlier = checks["gpu3"]["here"], checks["gpu3"]["earlier"]
    assert here / earlier - 1 > checks["gpu3"]["margin"]  # the faster host, beyond the margin
    assert abs(checks["gpu2"]["here"] / checks["gpu2"]["earlier"] - 1) <= checks["gpu2"]["margin"]
