"""A real PostgreSQL server for the tests of this folder, started once per session.

Installed by .ci/run (Debian's postgresql). Without it these tests skip with one
line; under CI (CI=true) a missing server is a failure, never a skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from autotune.testservers.postgres import PostgresServer, bin_dir


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    if bin_dir() is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the PostgreSQL tests: pg_ctl not found")
        pytest.skip("no PostgreSQL here (apt-get install postgresql)")
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def pg_url(postgres: PostgresServer) -> str:
    """A fresh database on the session's server; the URL carries no password (PGPASSWORD does)."""
    return postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def pg_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment a worker gets: the password in PGPASSWORD, never in a URL."""
    from autotune.testservers.postgres import PASSWORD

    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    return {**os.environ, "PGPASSWORD": PASSWORD}
