"""Errors a user can act on. The CLI prints them as one line and exits non-zero."""

from __future__ import annotations


class AutotuneError(Exception):
    """A problem the user can fix; printed as one line, never as a traceback."""

    exit_code = 1


class ConfigError(AutotuneError):
    """Bad input in a config, search-space or unit file: names the file, key path and value."""

    exit_code = 2

    def __init__(self, file: str | None, key: str | None, problem: str) -> None:
        self.file = file
        self.key = key
        self.problem = problem
        where = ": ".join(part for part in (file, key) if part)
        super().__init__(f"{where}: {problem}" if where else problem)


class StudyStopped(ConfigError):
    """A trial failed in a way no other config can avoid: the installed server does not
    have a flag, or the unit's model does not load. Stops the study instead of recording
    every remaining trial as infeasible."""


class DeployError(AutotuneError):
    """The deployment transport failed (SSH down, permission denied, disk full).

    Not the trial config's fault: such a failure must never be recorded as an
    infeasible config.
    """


class ServerFailed(AutotuneError):
    """The server refused, crashed or never became ready with the trial's config."""

    def __init__(self, kind: str, reason: str, log_tail: str = "", flag: str | None = None) -> None:
        self.kind = kind
        self.reason = reason
        self.log_tail = log_tail
        self.flag = flag
        super().__init__(f"{kind}: {reason}")
