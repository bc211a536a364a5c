"""Several simulated GPU hosts sharing one study: stand-in systemd hosts running the simulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.helpers.e2e import free_port, sim_unit
from tests.helpers.fake_systemd_host import FakeSystemdHost

UNIT = "sglang-sim.service"
BASE_FLAGS = "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"


class SimHost:
    """One host: a stand-in systemd with the simulator installed and serving on its own port."""

    def __init__(self, root: Path, name: str, sim_flags: str = "--sim-load-time 0.2") -> None:
        self.name = name
        self.port = free_port()
        self.systemd = FakeSystemdHost(root / name)
        self.systemd.install(UNIT, sim_unit(self.port, BASE_FLAGS, sim_flags))

    def target(self) -> dict[str, Any]:
        h = self.systemd
        return {
            "name": self.name,
            "unit_file": str(h.unit_path(UNIT)),
            "base_url": f"http://127.0.0.1:{self.port}",
            "systemd": {
                "lock_file": str(h.root / "autotune.lock"),
                "systemctl": h.systemctl,
                "journalctl": h.journalctl,
            },
        }

    def cleanup(self) -> None:
        self.systemd.cleanup()


def workers_config(
    path: Path,
    storage: str,
    hosts: list[SimHost],
    *,
    n_trials: int,
    study: str = "fleet",
    finalists: int = 0,
    grace: int = 6,
) -> Path:
    config = {
        "study": {
            "name": study,
            "storage": storage,
            "n_trials": n_trials,
            "seed": 5,
            "startup_trials": 2,
            "heartbeat_grace": grace,
        },
        "target": {
            "deploy": "local-systemd",
            "unit": UNIT,
            "ready_timeout": 60,
            "infra_timeout": 120,
            "systemd": {"restart_timeout_s": 30.0},
        },
        "workers": [h.target() for h in hosts],
        "search_space": "sglang-mtp.yaml",
        "benchmark": {
            "concurrency": [1, 4],
            "max_tokens": 64,
            "min_duration": 0.5,  # the shortest: fleets, not figures
            "max_duration": 1.0,
            "ci_width": None,
            "warmup_requests": 1,
            "finalists": finalists,
            "finalist_rounds": 1,
            "load_phase_segment": 2,
        },
        "objective": {"constraints": {"min_running_requests": 4}},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
