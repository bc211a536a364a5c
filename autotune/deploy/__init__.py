"""Deployers: one per transport, behind `autotune.deploy.base.Deployer`."""

from autotune.deploy.base import Deployer

__all__ = ["Deployer"]
