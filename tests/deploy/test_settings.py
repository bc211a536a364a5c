"""Validation of the deploy settings, and building them from YAML mappings."""

from __future__ import annotations

import pytest

from autotune.deploy.gpu_wait import DEFAULT_COMMAND
from autotune.deploy.hostfiles import check_path
from autotune.deploy.settings import gpu_wait_settings, ssh_settings, systemd_settings
from autotune.deploy.ssh_runner import SSHSettings
from autotune.deploy.systemd import SystemdSettings, check_unit_name
from autotune.errors import ConfigError


@pytest.mark.parametrize(
    "name", ["sglang.service", "sglang-qwen@4.service", "a:b_c.d.service", "x.service"]
)
def test_good_unit_names(name: str) -> None:
    assert check_unit_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "sglang",
        "sglang.timer",
        "../x.service",
        "a b.service",
        "a;b.service",
        "-x.service",
        "$(x).service",
        "",
    ],
)
def test_bad_unit_names(name: str) -> None:
    with pytest.raises(ValueError):
        check_unit_name(name)


@pytest.mark.parametrize(
    "path", ["relative/x", "/", "/a/../b", "/a//b", "/a/b/", "/a\nb", "/a\x00b", "//a"]
)
def test_bad_paths(path: str) -> None:
    with pytest.raises(ValueError):
        check_path(path, "unit_file")


def test_good_path_may_have_spaces_and_quotes() -> None:
    assert check_path('/etc/it\'s "x"/a b.service', "unit_file")


def test_systemd_defaults() -> None:
    s = SystemdSettings(unit="sglang.service")
    assert s.resolved_unit_file == "/etc/systemd/system/sglang.service"
    assert s.resolved_backup_file == "/etc/systemd/system/sglang.service.autotune-orig"
    assert (s.lock_file, s.log_file, s.systemctl, s.journalctl) == (
        "/run/lock/autotune.lock",
        None,
        "systemctl",
        "journalctl",
    )
    with pytest.raises(ValueError):
        SystemdSettings(unit="sglang.service", systemctl="systemctl; reboot")
    with pytest.raises(ValueError):
        SystemdSettings(unit="sglang.service", backup_file="/etc/systemd/system/sglang.service")


def test_ssh_defaults_and_sudo_auto() -> None:
    s = SSHSettings(host="gpu1")
    assert (s.port, s.passphrase_env, s.known_hosts, s.accept_new_host_key) == (
        22,
        "AUTOTUNE_SSH_PASSPHRASE",
        "~/.ssh/known_hosts",
        False,
    )
    assert SSHSettings(host="gpu1", user="root").needs_sudo is False
    assert SSHSettings(host="gpu1", user="bob").needs_sudo is True
    assert SSHSettings(host="gpu1", user="bob", sudo=False).needs_sudo is False
    for bad in ({"host": "-oProxyCommand=x"}, {"host": "a b"}, {"host": "h", "port": 0}):
        with pytest.raises(ValueError):
            SSHSettings(**bad)  # type: ignore[arg-type]


def test_from_yaml_mappings() -> None:
    ssh = ssh_settings(
        {"host": "gpu1", "user": "bob", "connect_timeout_s": 5, "sudo": True}, "c.yaml"
    )
    assert (ssh.host, ssh.connect_timeout_s, ssh.sudo) == ("gpu1", 5, True)
    gpu = gpu_wait_settings({"command": ["nvidia-smi", "-q"], "timeout_s": 30}, "c.yaml")
    assert gpu is not None and gpu.argv == ("nvidia-smi", "-q")
    assert gpu_wait_settings(True) is not None and gpu_wait_settings(True).argv == DEFAULT_COMMAND  # type: ignore[union-attr]
    assert gpu_wait_settings(None) is None
    systemd = systemd_settings("sglang.service", None, {"log_file": "/var/log/sglang.log"})
    assert systemd.log_file == "/var/log/sglang.log"


@pytest.mark.parametrize(
    ("raw", "key", "problem"),
    [
        ({"host": "h", "prot": 22}, "target.ssh.prot", "unknown key"),
        ({"host": "h", "port": "22"}, "target.ssh.port", "must be int"),
        (
            {"host": "h", "accept_new_host_key": "yes"},
            "target.ssh.accept_new_host_key",
            "must be bool",
        ),
        ({"user": "bob"}, "target.ssh.host", "is required"),
        ({"host": "h", "port": 70000}, "target.ssh", "out of range"),
    ],
)
def test_yaml_errors_name_the_key(raw: dict[str, object], key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        ssh_settings(raw, "autotune.yaml")
    assert err.value.key == key and err.value.file == "autotune.yaml"
    assert problem in err.value.problem


def test_systemd_mapping_cannot_override_the_unit() -> None:
    with pytest.raises(ConfigError, match=r"target.systemd.unit: unknown key"):
        systemd_settings("a.service", None, {"unit": "b.service"})
