"""What a measurement beside the fixed levels needs of its trial: the open-loop rates
(`run/rates.py`) and the changing-load phase (`run/load_phase.py`) read these, and only
these, so that neither imports the trial pipeline that calls them."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.bench.arrivals import Trace
from autotune.bench.workload import Workload
from autotune.config import Config
from autotune.deploy.base import Deployer
from autotune.engines.base import Engine
from autotune.run.stopping import StopRequest


@dataclass(frozen=True)
class Measuring:
    cfg: Config
    url: str
    """Where the benchmark reaches the server (an SSH link's local end, maybe)."""
    api_key: str | None
    engine: Engine
    deployer: Deployer
    workload: Workload
    stop: StopRequest
    trace: Trace | None
    """The recorded arrivals the rates replay, when the config names a trace."""
