"""A real PostgreSQL server for the tests: initdb + pg_ctl in a temporary directory.

Run as the unprivileged `postgres` user when the tests run as root (the server
refuses to run as root), listening on 127.0.0.1 only, with password
authentication so that the tests can check where the password goes.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from autotune.testservers.ports import free_port

USER = "autotune"
PASSWORD = "s3cret-pg-pass"  # a value the tests look for in logs, reports and the study


def bin_dir() -> Path | None:
    """Debian keeps the server programs under /usr/lib/postgresql/<major>/bin (newest first)."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parent.parent.name),
        reverse=True,
    )
    if found:
        return Path(found[0]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


class PostgresServer:
    def __init__(self) -> None:
        bindir = bin_dir()
        if bindir is None:
            raise RuntimeError("PostgreSQL is not installed (.ci/run installs Debian's postgresql)")
        self.bin = bindir
        self.root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self._as:
            os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            USER,
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
            "--no-sync",
        )
        self.start()

    def _run(self, program: str, *args: str) -> None:
        proc = subprocess.run(
            [*self._as, str(self.bin / program), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{program} failed: {proc.stdout}\n{proc.stderr}")

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=100"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-o",
            options,
            "-w",
            "start",
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def url(self, database: str = "postgres", *, password: str | None = PASSWORD) -> str:
        auth = f"{USER}:{password}" if password is not None else USER
        return f"postgresql+psycopg://{auth}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A fresh database (one per test); returns its URL without the password."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=USER,
            password=PASSWORD,
            dbname="postgres",
            autocommit=True,
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name, password=None)

    def close(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self.stop()
        finally:
            for _ in range(3):
                shutil.rmtree(self.root, ignore_errors=True)
                if not self.root.exists():
                    break
                time.sleep(0.5)
