"""Failures of the host, not of the config: what a server's log says when its environment
cannot run it, whatever flags it was given.

A config's failure (refused, out of memory, too few running requests) is a result the
sampler learns from. These say nothing about the config: the program or a module is not
installed, no GPU is visible, the model path is missing, the port is taken, the disk is
full, a file cannot be opened. Recording them as infeasible trials would fill a study with
false results (every trial of a night `crash_on_start … No module named 'sglang'`), so the
study stops with one line naming the cause and what to fix, and the trial is given back.

The messages are the ones the server's own runtime prints, matched at the start of a log
line (after the engine's own prefix is stripped): a warning that merely mentions a missing
optional module in the middle of a line (vLLM's `Failed to import from vllm._C with
ModuleNotFoundError(...)`) is not the cause of a death. Where each message comes from:

- Python 3 itself: `python3 -m pkg.mod` without `pkg` prints
  `<python>: Error while finding module specification for 'pkg.mod' (ModuleNotFoundError:
  No module named 'pkg')`, `python3 -m pkg` prints `<python>: No module named pkg`, an import
  inside the program dies with `ModuleNotFoundError: No module named 'x'`; OS errors print as
  `PermissionError: [Errno 13] Permission denied: '…'` and `OSError: [Errno 28] No space
  left on device` (checked by running them: tests/engines/test_host_failures.py);
- a shell or `/usr/bin/env` in ExecStart: `…: not found` / `command not found` (exit 127),
  `/usr/bin/env: 'x': No such file or directory`;
- systemd: exit status 203 (`EXIT_EXEC`, src/basic/exit-status.h) when it cannot execute
  the program, with `Failed to locate executable X: No such file or directory` or
  `Failed at step EXEC spawning X: …` in the unit's journal (src/core/exec-invoke.c);
- PyTorch, which SGLang and vLLM run on: `RuntimeError: No CUDA GPUs are available`,
  `Found no NVIDIA driver on your system`, `CUDA driver initialization failed`, `no
  CUDA-capable device is detected`; vLLM's `Failed to infer device type` (vllm/platforms);
  SGLang's `No accelerator (CUDA, XPU, HPU) is available.` (0.5.6; 0.5.16 on: `… or platform
  plugin is available.`, srt/utils);
- transformers, under SGLang and vLLM, for a model path that is not there: 4.57 (SGLang
  0.5.6) `Can't load the configuration of '…'`, 5.x (0.5.16 on) `Repo id must be in the form
  'repo_name' or 'namespace/repo_name': '…'`;
- llama.cpp, vLLM and SGLang's own model-path and bind messages stay in their adapters,
  which return these kinds for them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.engines._text import clip
from autotune.engines.base import Failure
from autotune.errors import HOST_FAILURES, HOST_FIXES

__all__ = ["HOST_FAILURES", "HOST_FIXES", "host_failure", "is_host_failure"]


@dataclass(frozen=True)
class _Sign:
    kind: str
    pattern: re.Pattern[str]
    reason: str
    """The reason, with `{0}`, `{1}` … for the pattern's groups."""


def _sign(kind: str, pattern: str, reason: str) -> _Sign:
    return _Sign(kind, re.compile(pattern), reason)


# Most telling first: a missing module explains a CUDA error printed after it, never the
# other way round.
_SIGNS = (
    _sign(
        "module_missing",
        r"^\S*: Error while finding module specification for '([^']+)' "
        r"\(ModuleNotFoundError: No module named '([^']+)'\)",
        "No module named '{1}' (python -m {0})",
    ),
    _sign("module_missing", r"^(\S*python[\d.]*): No module named (\S+)", "No module named {1}"),
    _sign(
        "program_missing",
        r"Failed to locate executable (\S+): No such file or directory",
        "systemd cannot find the unit's program {0}",
    ),
    _sign(
        "program_missing",
        r"Unable to locate executable '([^']+)'",  # systemd after 252's wording
        "systemd cannot find the unit's program {0}",
    ),
    _sign(
        "program_missing",
        r"Failed at step EXEC spawning (\S+): No such file or directory",
        "systemd cannot find the unit's program {0}",
    ),
    _sign(
        "permission_denied",
        r"Failed at step EXEC spawning (\S+): Permission denied",
        "systemd may not execute the unit's program {0} (Permission denied)",
    ),
    _sign(
        "program_missing",
        r"^/usr/bin/env: ['‘]([^'’]+)['’]: No such file or directory",
        "the unit's program {0} is not installed (/usr/bin/env cannot find it)",
    ),
    _sign(
        "program_missing",
        r"^\S+: (?:\d+: )?(?:line \d+: )?(?:exec: )?(\S+): (?:command )?not found$",
        "the program {0} is not installed",
    ),
    _sign(
        "module_missing",
        r"^(?:ModuleNotFoundError|ImportError): No module named '([^']+)'",
        "No module named '{0}'",
    ),
    _sign(
        "no_gpu",
        r"^(?:RuntimeError: |torch\.\S+: )?(No CUDA GPUs are available"
        r"|Found no NVIDIA driver on your system"
        r"|CUDA driver initialization failed"
        r"|.*no CUDA-capable device is detected"
        r"|The NVIDIA driver on your system is too old"
        r"|Failed to infer device type"
        r"|No accelerator \([^)]*\) (?:or platform plugin )?is available)",
        "the server sees no GPU: {0}",
    ),
    _sign(
        "no_gpu",
        r"^(?:ImportError|OSError): (libcuda\.so[.\d]*): cannot open shared object file",
        "the NVIDIA driver's {0} is not installed",
    ),
    _sign(
        "module_missing",
        r"^(?:ImportError|OSError): (\S+\.so[.\d]*): cannot open shared object file",
        "the shared library {0} is not installed",
    ),
    # transformers / huggingface_hub, which SGLang and vLLM load a model's config through; vLLM
    # words a bad path its own way (vllm/transformers_utils/config.py).
    _sign(
        "model_missing",
        r"((?:\S+ )?is not a local folder and is not a valid model identifier"
        r"|Repo id must (?:be in the form|use alphanumeric)[^\n]*"
        r"|Invalid repository ID or local directory specified[^\n]*"
        r"|Can't load the configuration of '[^']*'"
        r"|We couldn't connect to '[^']*' to load[^\n]*)",
        "the model is not there: {0}",
    ),
    _sign(
        "disk_full",
        r"(?:\[Errno 28\] )?No space left on device(?:: '([^']*)')?",
        "No space left on device",
    ),
    _sign(
        "permission_denied",
        r"^PermissionError: \[Errno 13\] Permission denied: '([^']*)'",
        "Permission denied: {0}",
    ),
    _sign(
        "port_in_use",
        r"(\[Errno 98\][^\n]*|[Aa]ddress already in use)",
        "cannot listen: {0}",
    ),
)

#: Exit codes that say it on their own: a shell's 127 (not found) and 126 (not executable),
#: systemd's 203 (EXIT_EXEC: it could not execute ExecStart).
_EXIT_CODES = {
    127: ("program_missing", "the unit's program was not found (exit code 127)"),
    126: ("permission_denied", "the unit's program may not be executed (exit code 126)"),
    203: ("program_missing", "systemd could not execute the unit's program (status=203/EXEC)"),
}


def host_failure(lines: list[str], exit_code: int | None) -> Failure | None:
    """The host's failure that `lines` (the server's log, the engine's line prefixes
    stripped) show, or None when nothing in them is the host's."""
    for sign in _SIGNS:
        for line in lines:
            m = sign.pattern.search(line.strip())
            if m is not None:
                groups = [g or "" for g in m.groups()] or [m.group(0)]
                return Failure(sign.kind, clip(sign.reason.format(*groups)))
    if exit_code in _EXIT_CODES:
        return Failure(*_EXIT_CODES[exit_code])
    return None


def is_host_failure(kind: str) -> bool:
    return kind in HOST_FAILURES
