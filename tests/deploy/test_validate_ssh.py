"""`autotune validate` over real SSH (sshd on 127.0.0.1, the stand-in systemd): every check,
every problem on its own line, nothing changed on the host."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import SshRig
from tests.deploy.test_study_ssh import UNIT, _config
from tests.helpers.e2e import autotune, free_port, sim_unit
from tests.helpers.fake_systemd_host import FakeSystemdHost

pytestmark = pytest.mark.slow

FLAGS = "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"


def _host_state(host: FakeSystemdHost) -> str:
    """Everything on the host autotune could change: units, backups, lock file."""
    digest = hashlib.sha256()
    for path in sorted(host.root.rglob("*")):
        if path.is_file() and "state" not in path.parts:
            digest.update(str(path).encode() + path.read_bytes())
    return digest.hexdigest()


def _validate(config: Path) -> tuple[int, list[str], list[str]]:
    proc = autotune("validate", "--config", str(config), cwd=config.parent, timeout=120)
    assert "Traceback" not in proc.stderr
    return proc.returncode, proc.stdout.splitlines(), proc.stderr.splitlines()


def test_a_good_ssh_target_passes_every_check(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    port = free_port()
    fake_host.install(UNIT, sim_unit(port, FLAGS))
    config = _config(world_dir, ssh_rig, fake_host, port, n_trials=3)
    before = _host_state(fake_host)
    code, out, err = _validate(config)
    assert code == 0, err
    checks = {line.split(":")[0] for line in out if line.startswith("ok  ")}
    assert checks == {
        "ok  storage",
        "ok  disk",
        "ok  api key",
        "ok  target",
        "ok  unit",
        "ok  server",
        "ok  estimate",
    }
    assert any("answers (HTTP 200)" in line for line in out), out
    assert _host_state(fake_host) == before
    assert not (world_dir / "study.db").exists(), "validate must not create the study database"


def test_every_mistake_is_reported_not_just_the_first(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    port = free_port()
    # No --speculative-algorithm: the tuned flags would change nothing.
    unit = sim_unit(port, FLAGS).replace("--speculative-algorithm EAGLE ", "")
    fake_host.install(UNIT, unit, start=False)
    config = _config(world_dir, ssh_rig, fake_host, port, n_trials=3)
    data = yaml.safe_load(config.read_text())
    data["study"]["storage"] = f"sqlite:///{world_dir / 'no-such-folder' / 'study.db'}"
    data["target"]["api_key_env"] = "AUTOTUNE_TEST_NO_SUCH_KEY"
    config.write_text(yaml.safe_dump(data))
    before = _host_state(fake_host)
    code, _out, err = _validate(config)
    assert code == 2
    problems = [line for line in err if line.startswith("autotune: error:")]
    assert len(problems) == 4, err
    joined = "\n".join(problems)
    assert "study.storage: folder" in joined and "does not exist" in joined
    assert "AUTOTUNE_TEST_NO_SUCH_KEY is not set" in joined
    assert "ExecStart: has no --speculative-algorithm" in joined
    assert f"nothing answers at http://127.0.0.1:{port}" in joined
    assert _host_state(fake_host) == before


def test_an_unreachable_host_names_host_and_port(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    port = free_port()
    fake_host.install(UNIT, sim_unit(port, FLAGS), start=False)
    config = _config(world_dir, ssh_rig, fake_host, port, n_trials=3)
    data = yaml.safe_load(config.read_text())
    closed = free_port()
    data["target"]["ssh"]["port"] = closed
    config.write_text(yaml.safe_dump(data))
    code, _out, err = _validate(config)
    assert code == 2
    problems = [line for line in err if line.startswith("autotune: error:")]
    assert len(problems) == 1, err
    assert f"127.0.0.1:{closed}" in problems[0] and "connection refused" in problems[0]
    assert f"sshd listens on port {closed}" in problems[0]


def test_with_the_host_down_the_copy_is_checked_and_the_rest_listed_as_skipped(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    """SSH refused: the unit's own problem (no --host, so a remote URL cannot reach it) is
    found on the local copy now, not after SSH is fixed; what needs the host says so."""
    port = free_port()
    unit = sim_unit(port, FLAGS).replace("--host 127.0.0.1 ", "")
    fake_host.install(UNIT, unit, start=False)
    config = _config(world_dir, ssh_rig, fake_host, port, n_trials=3)
    (world_dir / UNIT).write_text(unit)
    data = yaml.safe_load(config.read_text())
    data["target"]["ssh"]["port"] = free_port()  # nothing listens there
    data["target"]["unit_copy"] = UNIT
    data["target"]["base_url"] = f"http://{socket.gethostname()}:{port}"
    config.write_text(yaml.safe_dump(data))
    code, out, err = _validate(config)
    assert code == 2
    problems = [line for line in err if line.startswith("autotune: error:")]
    assert [p.split(":")[2].strip() for p in problems] == ["target", "server"], err
    assert "listens on 127.0.0.1 only" in problems[1], problems
    assert "remove target.base_url" in problems[1] and "0.0.0.0" not in problems[1]
    skipped = [line for line in out if line.startswith("skipped  ")]
    assert skipped == ["skipped  unit copy: needs the host (the target check failed)"], out
    assert any(line.startswith("ok  unit:") and "checked on the copy" in line for line in out)
    assert not [line for line in err if not line.startswith("autotune: error:")], err


def test_a_server_on_loopback_is_unreachable_from_here(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    """SGLang's default --host 127.0.0.1 answers only on the GPU host itself."""
    port = free_port()
    fake_host.install(UNIT, sim_unit(port, FLAGS))
    config = _config(world_dir, ssh_rig, fake_host, port, n_trials=3)
    data = yaml.safe_load(config.read_text())
    data["target"]["base_url"] = f"http://{socket.gethostname()}:{port}"
    config.write_text(yaml.safe_dump(data))
    code, _out, err = _validate(config)
    assert code == 2
    problems = [line for line in err if line.startswith("autotune: error:")]
    assert len(problems) == 1, err
    assert "listens on 127.0.0.1 only" in problems[0], problems
    assert "through the SSH link" in problems[0] and "0.0.0.0" not in problems[0]
