"""Errors a user can act on. The CLI prints them as one line and exits non-zero."""

from __future__ import annotations

#: Failure kinds that are the host's, never the config's: the study stops, the trial is given
#: back (FAIL, its config queued again), and nothing is recorded as infeasible.
HOST_FAILURES = (
    "program_missing",
    "module_missing",
    "no_gpu",
    "model_missing",
    "disk_full",
    "permission_denied",
    "port_in_use",
    "not_ours",
)

#: What to do about each, for the one line the study stops with.
HOST_FIXES = {
    "program_missing": "install it on the host, or give ExecStart its full path",
    "module_missing": "install it in the Python environment the unit runs, "
    "or point ExecStart at the python that has it",
    "no_gpu": "check nvidia-smi on the host, the driver, and CUDA_VISIBLE_DEVICES in the unit",
    "model_missing": "check that the unit's model path exists on the host (or that the host "
    "can reach the model hub)",
    "disk_full": "free space on the host",
    "permission_denied": "give the service's user access to that path",
    "port_in_use": "stop the process that holds the port, or give the unit another --port "
    "(and target.base_url)",
    "not_ours": "stop the other server, or give the unit another --port (and target.base_url)",
}


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


class HostFailed(AutotuneError):
    """The host cannot run the server, whatever the config: a program or module missing, no
    GPU, the model path, the disk, a permission, the port held by another process. The study
    stops with one line saying what to fix; the trial is given back (FAIL, its config queued
    again), never recorded as infeasible, so `autotune start` runs it once the host is fixed."""

    exit_code = 3

    def __init__(self, kind: str, reason: str) -> None:
        self.kind = kind
        self.reason = reason
        self.fix = HOST_FIXES.get(kind, "fix the host")
        super().__init__(
            f"the host, not the config: {reason} [{kind}]: {self.fix}; nothing was recorded as "
            "infeasible, and autotune start resumes the study once it is fixed"
        )


class UnitDoesNotServe(StudyStopped):
    """The unit as it is (the baseline, trial 0) did not serve: nothing else is worth trying
    until it does, and no result of it is recorded."""
