"""What the tests share: end-to-end study helpers (e2e.py), a daemon under test (daemon.py),
the stand-in systemd host and its fixtures (fake_systemd_host.py, fixtures/), the real-engine
harness (real_engine.py), a study played in process (modelled.py), HTTP routes of the
engines (routes.py), and the workers' order (scheduling.py). The servers experiments start
too (sshd, PostgreSQL) are in `autotune/testservers/`."""
