"""Where the benchmark reaches the server: `target.base_url`, or through the SSH link.

SGLang and llama-server listen on 127.0.0.1 unless told otherwise, and an inference
server has no authentication unless `--api-key` is set: most operators keep it on the
GPU host's loopback. For `deploy: ssh` with no `base_url` and such a unit,
the benchmark goes through a local forward over the deployer's own SSH connection
(`autotune/deploy/tunnel.py`) instead of asking for `--host 0.0.0.0`. `target.tunnel:
false` and an explicit `base_url` keep the direct way; `tunnel: true` forwards to the
port of `base_url` (or the unit's) whatever the unit listens on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from autotune.config import Config
from autotune.deploy import Deployer
from autotune.engines import get_engine
from autotune.errors import ConfigError
from autotune.unit import unitfile

LOOPBACK = ("127.0.0.1", "localhost", "::1")
ALL_INTERFACES = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class Address:
    url: str
    """What the benchmark and the adapter's requests go to."""
    tunnel: Any | None  # autotune.deploy.tunnel.Tunnel: the link a failed level is checked on
    how: str
    """One line for `validate` and the log: how the server is reached."""


def listens(cfg: Config, unit_text: str) -> tuple[str, int]:
    """(address, port) the unit's server listens on, as its host sees it."""
    engine = get_engine(cfg.target.engine)
    argv = unitfile.parse_exec_start(unit_text, source=str(cfg.target.unit_file)).argv
    flags = unitfile.flags(argv)
    host = flags.get("--host") or engine.default_host
    raw = flags.get("--port")
    try:
        port = int(raw) if raw else engine.default_port
    except ValueError:
        raise ConfigError(str(cfg.target.unit_file), "ExecStart", f"--port {raw!r}") from None
    return host, port


def tunnels(cfg: Config, unit_text: str) -> bool:
    """The study reaches the server through the SSH link."""
    t = cfg.target
    if t.deploy != "ssh" or t.tunnel is False:
        return False
    if t.tunnel:
        return True
    host, _ = listens(cfg, unit_text)
    return not t.base_url_set and host not in ALL_INTERFACES


def resolve(cfg: Config, deployer: Deployer, unit_text: str) -> Address:
    """The address for this deployer's server; opens the tunnel when one is used."""
    t = cfg.target
    if t.deploy != "ssh":
        return Address(t.base_url, None, f"{t.base_url} (target.base_url)")
    host, port = listens(cfg, unit_text)
    if not t.base_url_set and hasattr(deployer, "port"):
        deployer.port = port  # type: ignore[attr-defined]  # its listener is checked there
    if not tunnels(cfg, unit_text):
        if t.base_url_set:
            return Address(t.base_url, None, f"{t.base_url} (target.base_url)")
        url = f"http://{t.ssh['host']}:{port}"
        return Address(url, None, f"{url} (the unit listens on {host or 'every address'})")
    if t.base_url_set:
        port = urlparse(t.base_url).port or port
    there = "127.0.0.1" if host in ALL_INTERFACES or host == "localhost" else host
    forward = getattr(deployer, "forward", None)
    tunnel = forward(port, there) if forward is not None else None
    if tunnel is None:
        return Address(t.base_url, None, f"{t.base_url} (no SSH link to forward over)")
    url = f"http://127.0.0.1:{tunnel.local_port}"
    return Address(url, tunnel, f"through the SSH link: {url} -> {there}:{port} on the host")
