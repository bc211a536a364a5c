"""The local runner and the quoting every remote command goes through."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autotune.deploy.runner import LocalRunner, brief, command_line
from autotune.errors import DeployError

NASTY = [
    "plain",
    "with space",
    "it's",
    'say "hi"',
    "$(touch /tmp/autotune-pwned)",
    "`touch /tmp/autotune-pwned`",
    "; rm -rf /nonexistent-autotune",
    "back\\slash",
    "new\nline",
    "*",
    "",
    "--flag=a b",
]


def test_command_line_survives_a_posix_shell() -> None:
    argv = [sys.executable, "-c", "import json,sys; print(json.dumps(sys.argv[1:]))", *NASTY]
    done = subprocess.run(
        command_line(argv), shell=True, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == NASTY


def test_brief_hides_inline_scripts() -> None:
    assert (
        brief(["/bin/sh", "-c", "long\nscript", "name", "/a b"])
        == "/bin/sh -c '<script>' name '/a b'"
    )


def test_local_runner_runs_argv_without_a_shell() -> None:
    result = LocalRunner().run(["printf", "%s|", *NASTY[:5]], stdin=b"")
    assert result.ok
    assert result.out == "|".join(NASTY[:5]) + "|"


def test_local_runner_passes_stdin_and_exit_code() -> None:
    result = LocalRunner().run(["sh", "-c", "cat; exit 7"], stdin=b"data")
    assert (result.exit_code, result.stdout) == (7, b"data")


def test_local_runner_timeout_is_a_deploy_error() -> None:
    with pytest.raises(DeployError, match="timed out after"):
        LocalRunner().run(["sleep", "5"], timeout=0.2)


def test_local_runner_missing_program_is_a_deploy_error() -> None:
    with pytest.raises(DeployError, match="cannot run"):
        LocalRunner().run(["/nonexistent/autotune-tool"])


def test_local_process_lives_until_stdin_closes() -> None:
    proc = LocalRunner().start(["sh", "-c", "echo ready; exec cat >/dev/null"])
    assert proc.readline(5).strip() == "ready"
    assert proc.alive()
    proc.close()
    assert not proc.alive()
