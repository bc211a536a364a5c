"""What is checked before anything is deployed: the unit, its flags, the API key.

`autotune start` and `autotune validate` run the same checks, so a config that validates
does not fail on the first trial for a reason a check could have found. Each problem is
one ConfigError naming the file and the key.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from autotune.config import Config
from autotune.deploy.base import Deployer
from autotune.engines import get_engine
from autotune.engines.host import host_failure
from autotune.errors import ConfigError, HostFailed
from autotune.log import get
from autotune.unit import reach, unitfile, verify

log = get("autotune")


def check_unit(
    cfg: Config, unit_text: str, *, check_executables: bool = True
) -> dict[str, str | None]:
    """Parse the base unit and a patched sample; return its current flags. Raises ConfigError."""
    source = str(cfg.target.unit_file)
    argv = unitfile.parse_exec_start(unit_text, source=source).argv
    tuned = list(cfg.space.launch_flags())
    known = [*tuned, get_engine(cfg.target.engine).algorithm_flag]
    hidden = reach.hidden_flags(argv, known)
    if hidden is not None:
        raise ConfigError(source, "ExecStart", hidden)
    for flag, *_ in unitfile.split_flags(argv):
        meant = unitfile.near_miss(flag, known)
        if meant is not None:
            # The server would take it for that flag (argparse reads a prefix) or reject
            # it; either way the trial's own value would land beside it.
            raise ConfigError(source, "ExecStart", f"{flag}: did you mean {meant}?")
    _check_environment_files(cfg, unit_text, source)
    current = unitfile.flags(argv)
    sample = cfg.space.enumerate()[0].params
    unit_dir = str(cfg.target.unit_file.parent)
    patched = cfg.space.patch_unit(unit_text, sample, source=source, unit_dir=unit_dir)
    problems = verify.verify_unit(patched, cfg.target.unit, check_executables=check_executables)
    if problems:
        raise ConfigError(source, None, "systemd-analyze verify: " + problems[0])
    return current


def _check_environment_files(cfg: Config, unit_text: str, source: str) -> None:
    """An `EnvironmentFile=` wins over `Environment=`: a tuned variable it sets would never
    change, and the server does not report its environment to catch that after a deploy."""
    tuned = {p.env for p in cfg.space.params.values() if p.env is not None}
    if not tuned:
        return
    for value in unitfile.service_values(unit_text, "EnvironmentFile"):
        path = value.removeprefix("-")
        if cfg.target.deploy != "local-process":
            log.warning(
                "the unit reads an EnvironmentFile on the host: make sure it does not set "
                "a tuned variable, which would override the trial's Environment=",
                file=path,
                tuned=sorted(tuned),
            )
            continue
        try:
            found = unitfile.parse_environment_file(Path(path).read_text())
        except OSError:
            continue  # the deployer reports a missing required file
        overridden = sorted(tuned & found.keys())
        if overridden:
            raise ConfigError(
                source,
                "EnvironmentFile",
                f"{path} sets {', '.join(overridden)}, which overrides the tuned Environment= "
                "value: remove it from that file",
            )


def check_flags(cfg: Config, deployer: Deployer, *, quiet: bool = False) -> None:
    """Ask the installed server which flags it has, before anything is deployed.

    The unit's program is run with the engine's help arguments (`--help`), with the
    unit's environment. A search-space flag its help does not list (or lists as removed)
    is one ConfigError naming the space parameter; a program that cannot run at all is
    the host's failure (HostFailed), said here rather than after a model load. Of the
    unit's own flags, the speculative ones (a mistyped one would be dropped from tuning
    or refused after a model load) are held to the same help, with the listed flag it
    nearly spells. Only where the deployer can run the program (local-process);
    elsewhere the first trial that hits such a flag stops the study with the same line.
    """
    engine = get_engine(cfg.target.engine)
    unit = str(cfg.target.unit_file)
    args = engine.help_args()
    probe = getattr(deployer, "program_output", None)
    space_flags = cfg.space.launch_flags()
    if args is None or probe is None or not space_flags:
        return
    if not quiet:
        # SGLang's and vLLM's help import their framework first: seconds to a minute.
        log.info("asking the installed server which flags it has", args=" ".join(args))
    answer = probe(args)
    command = " ".join([*answer.command, *args])
    if answer.exit_code != 0:
        failure = host_failure(answer.text.splitlines(), answer.exit_code)
        if failure is not None:
            raise HostFailed(failure.kind, f"{command}: {failure.reason}")
        last = next((line for line in reversed(answer.text.splitlines()) if line.strip()), "")
        log.warning(
            "could not ask the server which flags it has: the first trial will say what "
            "is wrong, in the server's words",
            command=command,
            exit_code=answer.exit_code,
            last_line=last.strip()[:200],
        )
        return
    problems = engine.flag_problems(answer.text, list(space_flags))
    for flag, why in problems.items():
        raise ConfigError(cfg.space_source, f"params.{space_flags[flag]}.flag", f"{flag}: {why}")
    argv = unitfile.parse_exec_start(deployer.original_unit(), source=unit).argv
    family = _family(engine.algorithm_flag)
    speculative = [f for f, *_ in unitfile.split_flags(argv) if f.startswith(family)]
    listed = set(_LONG_FLAG.findall(answer.text))
    for flag, why in engine.flag_problems(answer.text, speculative).items():
        meant = unitfile.near_miss(flag, sorted(listed))
        raise ConfigError(
            unit, "ExecStart", f"{flag}: {why}" + (f"; did you mean {meant}?" if meant else "")
        )


_LONG_FLAG = re.compile(r"(?<![\w-])--[A-Za-z0-9][\w-]*")


def _family(flag: str) -> str:
    """`--speculative-` of `--speculative-algorithm`: the prefix an engine's speculative
    flags share."""
    return "-".join(flag.split("-")[:3]) + "-"


def api_key(cfg: Config) -> str | None:
    if cfg.target.api_key_env is None:
        return None
    key = os.environ.get(cfg.target.api_key_env)
    if not key:
        raise ConfigError(
            cfg.source,
            "target.api_key_env",
            f"environment variable {cfg.target.api_key_env} is not set",
        )
    return key


def levels_above_cap(cfg: Config, text: str) -> str | None:
    """A level above the unit's own cap on running requests measures the server's queue
    beside the same batch as the cap: it runs, but it is not the load it names."""
    engine = get_engine(cfg.target.engine)
    flags = unitfile.parse_exec_start(text, source=str(cfg.target.unit_file)).flags()
    caps = [(int(v), f) for f in engine.concurrency_flags if (v := flags.get(f)) and v.isdigit()]
    if not caps:
        return None
    cap, flag = min(caps)
    over = [c for c in cfg.benchmark.concurrency if c > cap]
    if not over:
        return None
    levels = ", ".join(f"c={c}" for c in over)
    return (
        f"benchmark.concurrency: {levels} above the unit's {flag} {cap}: the server runs {cap} "
        f"at once and queues the rest, so each such level measures c={cap} with a queue; "
        f"lower it to {cap} or below"
    )
