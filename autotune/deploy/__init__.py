"""Deployers: one per transport, behind `autotune.deploy.base.Deployer`.

    deployer = make_deployer(cfg.target, companions=[], log_dir=state, source=cfg.source)
    deployer.preflight(); deployer.deploy(unit_text, files); deployer.restore()

A deployer moves a unit file (and its companion files) into place, restarts the
service and reads its log; it knows nothing about Optuna or HTTP. A new transport is a
file here and a branch in `factory.py`.
"""

from autotune.deploy.base import Deployer
from autotune.deploy.factory import TRANSPORTS, Target, make_deployer

__all__ = ["TRANSPORTS", "Deployer", "Target", "make_deployer"]
