"""`autotune init` over real SSH: the live unit read with `systemctl cat` (the stand-in
systemd), a config and a copy of the unit written, validate run on them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import SshRig
from tests.helpers.e2e import autotune, free_port, sim_unit
from tests.helpers.fake_systemd_host import FakeSystemdHost

pytestmark = pytest.mark.slow

UNIT = "sglang-sim.service"
EAGLE = "--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8"


def _init(rig: SshRig, host: FakeSystemdHost, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    ssh = rig.settings()
    return autotune(
        "init",
        "--ssh",
        f"root@127.0.0.1:{ssh.port}",
        "--key-file",
        str(rig.client_key),
        "--known-hosts",
        str(rig.known_hosts),
        "--systemctl",
        host.systemctl,
        "--unit",
        UNIT,
        "--out",
        str(out),
        *extra,
        cwd=out.parent,
        timeout=120,
    )


def test_init_reads_the_live_unit_and_writes_a_config_that_validates(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    port = free_port()
    unit = sim_unit(port, EAGLE)
    fake_host.install(UNIT, unit)
    out = world_dir / "tuning"
    proc = _init(ssh_rig, fake_host, out)
    assert "Traceback" not in proc.stderr
    cfg = yaml.safe_load((out / "autotune.yaml").read_text())
    assert cfg["target"]["engine"] == "sglang" and cfg["target"]["deploy"] == "ssh"
    assert cfg["target"]["unit_file"] == str(fake_host.unit_path(UNIT))
    # The unit listens on the host's loopback: reached through the SSH link, no base_url.
    assert "base_url" not in cfg["target"]
    assert "through the SSH link" in proc.stdout, proc.stdout
    assert cfg["search_space"] == "sglang-eagle.yaml"  # topk 4: trees
    assert (out / UNIT).read_text() == unit
    text = (out / "autotune.yaml").read_text()
    assert "--speculative-eagle-topk 4" in text  # the current settings, in a comment
    assert "ok  target: ssh: reachable" in proc.stdout, proc.stdout + proc.stderr
    assert "ok  unit copy:" in proc.stdout and "ok  unit:" in proc.stdout

    # The unit changes on the host: validate says the copy is stale, naming the line.
    fake_host.write_unit(UNIT, unit.replace("topk 4", "topk 2"))
    again = autotune("validate", "--config", str(out / "autotune.yaml"), cwd=out)
    assert again.returncode == 2
    stale = [line for line in again.stderr.splitlines() if "target.unit_copy" in line]
    assert len(stale) == 1 and "topk 2" in stale[0], again.stderr


def test_an_execstart_in_a_drop_in_is_refused_in_one_line(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    port = free_port()
    fake_host.install(UNIT, sim_unit(port, EAGLE), start=False)
    drop_in = fake_host.unit_path(UNIT).with_name(f"{UNIT}.d")
    drop_in.mkdir()
    (drop_in / "override.conf").write_text("[Service]\nExecStart=\nExecStart=/bin/true\n")
    out = world_dir / "tuning"
    proc = _init(ssh_rig, fake_host, out)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("autotune: error")]
    assert len(errors) == 1 and "override.conf: ExecStart: this drop-in sets ExecStart" in errors[0]
    assert not (out / "autotune.yaml").exists()


def test_an_unknown_engine_and_a_missing_unit_are_one_line_each(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    fake_host.install(UNIT, "[Service]\nExecStart=/usr/bin/python3 -m http.server\n", start=False)
    out = world_dir / "tuning"
    proc = _init(ssh_rig, fake_host, out)
    assert proc.returncode == 1 and "cannot tell the engine from ExecStart" in proc.stderr
    other = autotune(
        "init", "--ssh", "root@127.0.0.1:1", "--unit", UNIT, "--out", str(out), cwd=world_dir
    )
    assert other.returncode == 1
    assert "127.0.0.1:1" in other.stderr and "sshd listens on port 1" in other.stderr
    assert "Traceback" not in proc.stderr + other.stderr
