"""`autotune validate`: every check that can be made without deploying, every problem reported.

Each check answers with what it saw (`ok`) or one line naming the problem and
where to fix it. Nothing is created or changed: the study database is opened
read-only (a missing SQLite file is not made), the host is only asked.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import httpx

from autotune.config import Config
from autotune.engines import get_engine
from autotune.errors import AutotuneError, ConfigError
from autotune.run.checks import levels_above_cap
from autotune.store import storage
from autotune.unit import unitfile

#: Below this much free space where trial files go, a night of server logs may not fit.
MIN_FREE_BYTES = 1 << 30


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    text: str  # what was seen, or the problem with where to fix it
    skipped: bool = False  # not run: `text` says what it needs
    warning: bool = False  # runs, but measures something else than it seems: `text` says what


class Skipped(Exception):
    """A check that cannot run now; its message says what it needs."""


def run(cfg: Config) -> list[Finding]:
    """Every check that can run, in the order an operator would fix them; the ones that
    cannot (the host is unreachable) are listed as skipped, with why."""
    findings: list[Finding] = []

    def check(name: str, fn: Callable[[], str]) -> None:
        try:
            findings.append(Finding(name, True, fn()))
        except Skipped as why:
            findings.append(Finding(name, True, str(why), skipped=True))
        except AutotuneError as exc:
            findings.append(Finding(name, False, str(exc)))

    def skip(name: str, why: str) -> None:
        findings.append(Finding(name, True, why, skipped=True))

    check("storage", lambda: _storage(cfg))
    check("disk", lambda: _disk(cfg))
    check("api key", lambda: _api_key(cfg))
    unit_text: list[str] = []
    check("target", lambda: _target(cfg, unit_text))
    text = unit_text[0] if unit_text else _copy(cfg)
    if text is None:
        why = "needs the host's unit (the target check failed, and there is no unit_copy)"
        for name in ("unit", "server"):
            skip(name, why)
    else:
        if cfg.target.unit_copy is not None and unit_text:
            check("unit copy", lambda: _unit_copy(cfg, text))
        elif not unit_text:
            skip("unit copy", "needs the host (the target check failed)")
        check("unit", lambda: _unit(cfg, text, from_copy=not unit_text))
        if _parses(text):
            above = levels_above_cap(cfg, text)
            if above:
                findings.append(Finding("levels", True, above, warning=True))
        if _parses(text):
            # A unit that does not parse was said once, above: one problem, one line.
            check("server", lambda: _server(cfg, text, probe=bool(unit_text)))
    check("estimate", lambda: _estimate(cfg, text))
    return findings


def _copy(cfg: Config) -> str | None:
    """The local copy of the host's unit (`target.unit_copy`), to check while the host
    cannot be reached."""
    copy = cfg.target.unit_copy
    if copy is None:
        return None
    try:
        return copy.read_text()
    except OSError:
        return None


def _estimate(cfg: Config, unit_text: str | None) -> str:
    from autotune.run import eta

    return eta.before_start(cfg, unit_text)


def _parses(text: str) -> bool:
    try:
        unitfile.parse_exec_start(text)
    except ConfigError:
        return False
    return True


def _storage(cfg: Config) -> str:
    url = cfg.study.storage
    shown = storage.redact(url)
    db = storage.sqlite_file(storage.expand(url, cfg.source))
    if db is not None and not db.is_file():
        folder = db.parent
        if not folder.is_dir():
            raise ConfigError(cfg.source, "study.storage", f"folder {folder} does not exist")
        if not _writable(folder):
            raise ConfigError(cfg.source, "study.storage", f"folder {folder} is not writable")
        return f"{shown}: a new study database will be created there"
    opened = storage.open_storage(url, source=cfg.source, create=False)
    why = storage.reachable(opened)
    if why is not None:
        raise ConfigError(cfg.source, "study.storage", f"cannot read {shown}: {why}")
    try:
        names = [s.study_name for s in opened.get_all_studies()]
    except storage.DATABASE_ERRORS:
        names = []  # an empty database: Optuna makes its tables at the first start
    finally:
        opened.engine.dispose()
    found = "resumes" if cfg.study.name in names else "creates"
    return f"{shown}: answers; `autotune start` {found} study {cfg.study.name!r}"


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def _disk(cfg: Config) -> str:
    from autotune.store.artifacts import artifact_dir

    where = artifact_dir(cfg.study.storage)
    probe = where if where.exists() else where.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < MIN_FREE_BYTES:
        raise AutotuneError(
            f"only {free / 2**20:.0f} MiB free under {probe} for the trials' files "
            f"(server logs, units): free at least {MIN_FREE_BYTES >> 30} GiB"
        )
    return f"{free / 2**30:.1f} GiB free under {probe}"


def _api_key(cfg: Config) -> str:
    from autotune.run.checks import api_key

    return "none needed" if api_key(cfg) is None else f"${cfg.target.api_key_env} is set"


def _target(cfg: Config, unit_text: list[str]) -> str:
    """Reach the host (SSH, sudo rights, the unit systemd loads, the lock) and read the unit."""
    from autotune.run.deployment import deployer_for

    if cfg.target.deploy == "local-process":
        unit_text.append(cfg.target.unit_file.read_text())
        return f"local-process: {cfg.target.unit_file}"
    deployer = deployer_for(cfg)
    try:
        deployer.preflight()
        current = getattr(deployer, "current_unit", None)
        text = current() if current is not None else deployer.original_unit()
        unit_text.append(text)
    finally:
        deployer.close()
    return f"{cfg.target.deploy}: reachable, rights and lock ok, {cfg.target.unit} read"


def _unit_copy(cfg: Config, text: str) -> str:
    """The unit on the host is still the one the config was written from."""
    copy = cfg.target.unit_copy
    assert copy is not None
    try:
        mine = copy.read_text()
    except OSError as exc:
        problem = f"cannot read {copy}: {exc.strerror}"
        raise ConfigError(cfg.source, "target.unit_copy", problem) from None
    if mine == text:
        return f"{copy} is the host's {cfg.target.unit}"
    for n, (a, b) in enumerate(zip(mine.splitlines(), text.splitlines(), strict=False), 1):
        if a != b:
            raise ConfigError(
                cfg.source,
                "target.unit_copy",
                f"{copy} line {n} is {a.strip()!r}, the host's {cfg.target.unit} has "
                f"{b.strip()!r}: the unit changed since the config was written; run "
                "`autotune init` again or update the copy",
            )
    raise ConfigError(
        cfg.source,
        "target.unit_copy",
        f"{copy} and the host's {cfg.target.unit} differ in length: the unit changed since "
        "the config was written",
    )


def _unit(cfg: Config, text: str, *, from_copy: bool = False) -> str:
    """The unit parses, speculation is on, the tuned flags land where the server reads them."""
    from autotune.run.checks import check_flags, check_unit
    from autotune.run.deployment import deployer_for

    source = str(cfg.target.unit_file)
    check_unit(cfg, text, check_executables=cfg.target.deploy == "local-process")
    engine = get_engine(cfg.target.engine)
    flags = unitfile.parse_exec_start(text, source=source).flags()
    tuned = set(cfg.space.launch_flags())
    if engine.algorithm_flag not in flags and engine.algorithm_flag not in tuned:
        raise ConfigError(
            source,
            "ExecStart",
            f"has no {engine.algorithm_flag}: speculation is off, so the tuned flags "
            f"({', '.join(sorted(tuned))}) would change nothing. Add it "
            "(e.g. --speculative-algorithm EAGLE)",
        )
    if cfg.target.deploy == "local-process":
        deployer = deployer_for(cfg)
        try:
            check_flags(cfg, deployer, quiet=True)
        finally:
            deployer.close()
    present = sorted(f for f in tuned if f in flags)
    algorithm = flags.get(engine.algorithm_flag) or "(tuned)"
    seen = f" (checked on the copy {cfg.target.unit_copy}: the host's could not be read)"
    return (
        f"{cfg.target.unit}: {engine.algorithm_flag} {algorithm}; "
        f"tuned flags in ExecStart now: {', '.join(present) or 'none (added per trial)'}"
        + (seen if from_copy else "")
    )


def _server(cfg: Config, text: str, *, probe: bool = True) -> str:
    """The benchmark must reach the server from here, not only from the GPU host: directly,
    or through the SSH link when the unit listens on the host's loopback."""
    from autotune.run import address

    url = cfg.target.base_url
    if cfg.target.deploy == "local-process":
        return _port(cfg, url)
    host, port = address.listens(cfg, text)
    here = urlparse(url).hostname or ""
    through_link = address.tunnels(cfg, text)
    if (
        cfg.target.deploy == "ssh"
        and not through_link
        and cfg.target.base_url_set
        and here not in address.LOOPBACK
        and host in address.LOOPBACK
    ):
        raise ConfigError(
            cfg.source,
            "target.base_url",
            f"the server listens on {host} only, so {url} cannot reach it from here: remove "
            "target.base_url, and autotune reaches it through the SSH link (a local forward "
            "over its own connection; the unit stays as it is)",
        )
    if not probe:
        raise Skipped("whether the server answers needs the host (the target check failed)")
    if not through_link and cfg.target.deploy == "ssh" and not cfg.target.base_url_set:
        url = f"http://{cfg.target.ssh['host']}:{port}"
    if through_link:
        return _probe_through_link(cfg, text)
    got = _probe(cfg, url, "target.base_url")
    return f"{url}: answers (HTTP {got})"


def _port(cfg: Config, url: str) -> str:
    """A local server's port must be free for autotune to start one there, as `start`
    checks before each start (a server an earlier autotune left is stopped first)."""
    from autotune.run.deployment import deployer_for

    deployer = deployer_for(cfg)
    try:
        held = getattr(deployer, "port_held", lambda: None)()
    finally:
        deployer.close()
    if held is not None:
        raise ConfigError(
            cfg.source,
            "target.base_url",
            f"port {urlparse(url).port} is held by {held}, not by a server autotune started: "
            "stop that process, or give the unit another --port",
        )
    return f"{url}: the port is free; autotune starts the server itself"


def _probe(cfg: Config, url: str, key: str) -> int:
    try:
        for path in get_engine(cfg.target.engine).ready_paths():
            got = httpx.get(url.rstrip("/") + path, timeout=5)
            if got.status_code != 404:
                break
    except httpx.HTTPError as exc:
        raise ConfigError(
            cfg.source,
            key,
            f"nothing answers at {url} from here ({type(exc).__name__}: {exc}); "
            "is the server running, and is its port open to this machine?",
        ) from None
    return got.status_code


def _probe_through_link(cfg: Config, text: str) -> str:
    from autotune.run import address
    from autotune.run.deployment import deployer_for

    deployer = deployer_for(cfg)
    try:
        reached = address.resolve(cfg, deployer, text)
        got = _probe(cfg, reached.url, "target.tunnel")
    finally:
        deployer.close()
    return f"answers (HTTP {got}) {reached.how}"
