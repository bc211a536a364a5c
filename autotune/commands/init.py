"""`autotune init`: a first config from the live unit, then `autotune validate` on it.

Reads the unit as systemd loads it (`systemctl cat`: the fragment, then each
drop-in, so a drop-in that sets ExecStart is seen), tells the engine from its
ExecStart, reads its speculative settings, picks the built-in search space
that fits them, and writes a commented `autotune.yaml` with a copy of the unit
beside it. Nothing on the host is changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.deploy.runner import LocalRunner, Runner
from autotune.engines import Engine, engine_for
from autotune.errors import AutotuneError, ConfigError
from autotune.unit import unitfile

_CONSTRAINT_WHY = {"min_running_requests": "the server must still hold this many at once"}


@dataclass(frozen=True)
class Where:
    """Where the unit lives: over SSH, on this machine's systemd, or in a file."""

    deploy: str  # ssh | local-systemd | local-process
    ssh: dict[str, Any]
    unit: str
    unit_file: Path | None = None  # local-process: the file itself
    systemctl: str = "systemctl"  # on the host, when it is not on the PATH


@dataclass(frozen=True)
class LiveUnit:
    fragment: str  # path of the file systemd loads
    text: str  # that file's content
    exec_start_from: str  # the file whose ExecStart wins (a drop-in, or the fragment)
    gpus: bool  # nvidia-smi is on the host: wait for free GPUs before each start


def parse_ssh(spec: str, key_file: str | None, known_hosts: str | None = None) -> dict[str, Any]:
    """`user@host[:port]` to a target.ssh mapping."""
    m = re.fullmatch(r"(?:([^@\s]+)@)?([^:@\s]+)(?::(\d+))?", spec)
    if m is None:
        raise AutotuneError(f"--ssh must look like user@host or user@host:port, got {spec!r}")
    out: dict[str, Any] = {"host": m.group(2)}
    if m.group(1):
        out["user"] = m.group(1)
    if m.group(3):
        out["port"] = int(m.group(3))
    if key_file:
        out["key_file"] = key_file
    if known_hosts:
        out["known_hosts"] = known_hosts
    return out


def read_live_unit(where: Where) -> LiveUnit:
    if where.deploy == "local-process":
        assert where.unit_file is not None
        try:
            text = where.unit_file.read_text()
        except OSError as exc:
            raise AutotuneError(f"cannot read {where.unit_file}: {exc.strerror}") from None
        return LiveUnit(str(where.unit_file), text, str(where.unit_file), False)
    runner = _runner(where)
    try:
        got = runner.run([where.systemctl, "cat", "--no-pager", where.unit])
        gpus = runner.run(["sh", "-c", "command -v nvidia-smi"]).ok
    finally:
        runner.close()
    if not got.ok:
        detail = (got.err or got.out).strip().splitlines()
        raise AutotuneError(
            f"systemctl cat {where.unit} on {runner.description} failed: "
            f"{detail[0] if detail else f'exit code {got.exit_code}'}"
        )
    return split_cat(got.out, gpus=gpus)


def _runner(where: Where) -> Runner:
    if where.deploy == "ssh":
        from autotune.deploy.settings import ssh_settings
        from autotune.deploy.ssh_runner import SSHRunner

        runner = SSHRunner(ssh_settings(where.ssh, "--ssh"))
        runner.connect()
        return runner
    return LocalRunner()


def split_cat(out: str, *, gpus: bool = False) -> LiveUnit:
    """`systemctl cat` output: `# /path` before each file, fragment first."""
    files: list[tuple[str, list[str]]] = []
    for line in out.splitlines():
        if line.startswith("# /"):
            files.append((line[2:].strip(), []))
        elif files:
            files[-1][1].append(line)
    if not files:
        raise AutotuneError("systemctl cat printed no unit file")
    texts = [(path, "\n".join(lines).rstrip("\n") + "\n") for path, lines in files]
    winner = texts[0][0]
    for path, text in texts[1:]:
        if re.search(r"(?m)^\s*ExecStart\s*=", text):
            winner = path
    return LiveUnit(texts[0][0], texts[0][1], winner, gpus)


def run(where: Where, out_dir: Path, *, storage: str, force: bool) -> tuple[Path, list[str]]:
    """Write autotune.yaml and the unit copy; return the config path and notes for the user."""
    live = read_live_unit(where)
    notes: list[str] = []
    if live.exec_start_from != live.fragment:
        raise ConfigError(
            live.exec_start_from,
            "ExecStart",
            f"this drop-in sets ExecStart, so the flags autotune writes into {live.fragment} "
            "would not run: move ExecStart into the unit file (or remove it from the drop-in)",
        )
    argv = unitfile.parse_exec_start(live.text, source=live.fragment).argv
    flags = unitfile.flags(argv)
    engine = engine_for(argv)
    space, why = engine.default_space(flags)
    port = flags.get("--port") or str(engine.default_port)
    listens = flags.get("--host")
    host = where.ssh.get("host", "127.0.0.1") if where.deploy == "ssh" else "127.0.0.1"
    heard = listens or engine.default_host
    through_link = where.deploy == "ssh" and heard not in ("0.0.0.0", "::", "")
    if through_link:
        notes.append(
            f"the server listens on {heard} on the host: the benchmark reaches it through the "
            "SSH link (no base_url), the unit stays as it is"
        )
    if where.deploy == "local-process" and unitfile.service_values(live.text, "User"):
        notes.append(
            "the unit's User= is not applied with --unit-file: autotune runs the server as "
            "the user running autotune"
        )
    config = out_dir / "autotune.yaml"
    # A local unit file is its own copy; a host's is kept beside the config.
    copy = None if where.deploy == "local-process" else out_dir / where.unit
    for path in (config, copy):
        if path is not None and path.exists() and not force:
            raise AutotuneError(f"{path} exists: remove it or pass --force")
    url = None if through_link else f"http://{host}:{port}"
    running = _running_now(engine, url) if url is not None else None
    text = _config_text(where, live, engine, space, why, url, storage, flags, running)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        if copy is not None:
            copy.write_text(live.text)
        config.write_text(text)
    except OSError as exc:
        raise AutotuneError(f"cannot write into --out {out_dir}: {exc.strerror}") from None
    return config, notes


def _running_now(engine: Engine, url: str) -> int | None:
    """How many requests the live server runs at once, when it answers now (it may be
    stopped: init reads the unit, not the server)."""
    import asyncio

    try:
        info = asyncio.run(asyncio.wait_for(engine.server_info(url, [], None), 5.0))
    except Exception:  # not running, not reachable, guarded: the cap stands in
        return None
    return info.max_running_requests


#: The worst p90 of the default sampler's deployments to 98 % of the optimum over the
#: simulator's cells (experiments/results/sample_efficiency.md: 14), with room for a noisy host.
_TRIALS_FOR_A_LARGE_SPACE = 20
_LEVELS = (1, 16, 64)


def _config_text(
    where: Where,
    live: LiveUnit,
    engine: Engine,
    space: str,
    why: str,
    base_url: str | None,
    storage: str,
    flags: dict[str, str | None],
    running: int | None = None,
) -> str:
    """The commented config; `running`: the requests the live server runs at once now,
    when it answered."""
    current = {f: v for f, v in flags.items() if f.startswith(("--speculative", "--spec-"))}
    now = ", ".join(f"{k} {v}" for k, v in current.items()) or "none"
    cap, cap_flag = _concurrency_cap(engine, flags)
    levels = _levels(cap)
    lines = [
        f"# Written by `autotune init` from {where.unit} ({live.fragment}).",
        f"# Speculative settings in the unit now: {now}.",
        "# Check with `autotune validate`, then run with `autotune start`.",
        *_study_lines(where, space, storage),
        "",
        *_target_lines(where, live, engine, base_url),
        "",
        f"search_space: {space}    # {why}",
        "",
        *_benchmark_lines(levels, cap, cap_flag),
        "",
        *_objective_lines(engine, space, flags, levels, cap, running),
        "",
    ]
    return "\n".join(lines)


def _study_lines(where: Where, space: str, storage: str) -> list[str]:
    size = _space_size(space)
    n_trials = min(size, _TRIALS_FOR_A_LARGE_SPACE) if size else _TRIALS_FOR_A_LARGE_SPACE
    if size and size <= _TRIALS_FOR_A_LARGE_SPACE:
        trials_why = f"each of the space's {size} configs once"
    else:
        # experiments/results/sample_efficiency.md: 98 % of the optimum within 14 deployments, p90.
        trials_why = f"of {size or 'its'} configs; 14 found 98 % of the best at p90 simulated"
    finish = (
        "the winner keeps serving after the study (restore: the unit as it was)"
        if where.deploy != "local-process"
        else "the winner keeps serving after autotune exits (stop: no server left)"
    )
    return [
        "study:",
        f"  name: {Path(where.unit).stem}",
        f"  storage: {storage}    # relative paths: beside this file",
        f"  n_trials: {n_trials}    # the study's total, across restarts ({trials_why})",
        f"  on_finish: apply-best    # {finish}",
    ]


def _target_lines(where: Where, live: LiveUnit, engine: Engine, base_url: str | None) -> list[str]:
    local = where.deploy == "local-process"
    lines = [
        "target:",
        f"  engine: {engine.name}",
        f"  deploy: {where.deploy}",
        f"  unit: {where.unit}",
        f"  unit_file: {live.fragment}"
        + ("" if local else "    # the file systemd loads, on the host"),
        *(
            []
            if local
            else [f"  unit_copy: {where.unit}    # the unit as read; validate says if it changed"]
        ),
        f"  base_url: {base_url}    # where the benchmark reaches the server from here"
        if base_url is not None
        else "  # no base_url: the server listens on the host's loopback, reached through the "
        "SSH link",
        "  ready_timeout: 900                   # model load plus CUDA graph capture",
    ]
    if local and unitfile.service_values(live.text, "User"):
        lines.append(
            "  # The unit's User= is not applied here: autotune runs the server as itself."
        )
    if where.deploy == "ssh":
        lines.append("  ssh:")
        lines += [f"    {k}: {v}" for k, v in where.ssh.items()]
    if where.systemctl != "systemctl":
        lines += ["  systemd:", f"    systemctl: {where.systemctl}"]
    if live.gpus:
        lines.append("  gpu_wait: {}                         # wait for the GPUs to be free")
    return lines


def _benchmark_lines(levels: list[int], cap: int | None, cap_flag: str | None) -> list[str]:
    levels_why = (
        f"up to the unit's {cap_flag} {cap}"
        if cap is not None and cap < _LEVELS[-1]
        else "one request, a busy server, a full one"
    )
    return [
        "benchmark:",
        f"  concurrency: [{', '.join(map(str, levels))}]    # {levels_why}",
        "  workload: natural                    # sampled replies that stop at end of sequence",
        "  max_tokens: 512                      # per reply: long enough for speculation to settle",
        "  min_duration: 20                     # seconds of steady state per level, at least",
        "  max_duration: 90                     # a noisy level is measured until this, at most",
    ]


def _objective_lines(
    engine: Engine,
    space: str,
    flags: dict[str, str | None],
    levels: list[int],
    cap: int | None,
    running: int | None,
) -> list[str]:
    lines = [
        "objective:",
        "  mode: geomean                        # the geometric mean of tok/s over the levels",
    ]
    if engine.init_constraints:
        lines.append("  constraints:")
        for key, value in engine.init_constraints:
            why = _CONSTRAINT_WHY.get(key, "")
            if key == "min_running_requests":
                value, why = _floor(space, flags, min(value, levels[-1]), cap, running)
            lines.append(f"    {key}: {value}    # {why}".rstrip(" #"))
    return lines


def _floor(
    space_name: str,
    flags: dict[str, str | None],
    default: int,
    cap: int | None,
    running: int | None,
) -> tuple[int, str]:
    """The running-requests floor and the comment that says what it leaves feasible.

    Each config reserves `memory_per_request` tokens per request (the space file): the pool
    that holds the unit's own `running` requests at its own reservation m0 holds about
    running * m0 / m at m, never more than the unit's cap (the capacity rule with no fixed
    share per request, its low bound from one deployment: trees of the demo's space ran
    4-8 at once where the chain ran 21, issue 48; the simulator's (3, 4, 8) runs 8 where
    this says 6). The floor keeps half of what the unit runs now, at most the engine's
    default: a config that halves the server's room is a choice the operator makes, by
    raising or lowering it, knowing how many configs it leaves.
    """
    from autotune import resources
    from autotune.search import study as st
    from autotune.space import load_space

    why = _CONSTRAINT_WHY["min_running_requests"]
    try:
        space = load_space(resources.search_space(space_name) or Path(space_name))
    except (OSError, AutotuneError):
        return default, why
    base = st.baseline_of(space, flags).params  # study params: decoded to the config it runs
    m0 = space.memory_tokens(space.decode(base)) if base else None
    held = running if running is not None else cap
    if m0 is None or held is None or not space.enumerable():
        return default, why + " (not predicted: " + (
            "the space does not say what a request reserves)"
            if m0 is None or not space.enumerable()
            else "the unit sets no cap and the server was not asked)"
        )
    predicted = []
    for c in space.enumerate():
        m = space.memory_tokens(c.params)
        if m:
            predicted.append(min(cap or held, int(held * m0 / m)))
    if not predicted:
        return default, why
    floor = max(1, min(default, held // 2))
    now = (
        f"the {held} requests the running server holds at once"
        if running is not None
        else f"the unit's cap of {held} requests at once"
    )
    leaves = sum(p >= floor for p in predicted)
    return floor, (
        f"half of {now}: {leaves} of {len(predicted)} configs predicted to hold it (trees "
        "reserve more per request); raise it if your traffic needs more"
    )


def _space_size(space: str) -> int | None:
    """How many configs the built-in space (or the engine's own file) holds."""
    from autotune import resources
    from autotune.space import load_space

    path = resources.search_space(space) or Path(space)
    try:
        return load_space(path).size()
    except (OSError, AutotuneError):
        return None


def _concurrency_cap(engine: Engine, flags: dict[str, str | None]) -> tuple[int | None, str]:
    """The smallest cap on running requests the unit sets, and the flag that sets it."""
    caps = []
    for flag in engine.concurrency_flags:
        value = flags.get(flag)
        if value is not None and value.isdigit() and int(value) > 0:
            caps.append((int(value), flag))
    if not caps:
        return None, ""
    return min(caps)


def _levels(cap: int | None) -> list[int]:
    """1, 16, 64, kept within the unit's cap (the cap itself the top level)."""
    if cap is None:
        return list(_LEVELS)
    return sorted({c for c in _LEVELS if c < cap} | {min(cap, _LEVELS[-1])})
