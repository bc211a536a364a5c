"""`autotune bench`: argument errors are one line and exit 2; results as a table or JSON lines."""

from __future__ import annotations

import json

import pytest

from autotune.bench.cli import main

from .sse_server import ServerConfig, server_process


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "--url"),
        (["--url", "localhost:30000"], "http://"),
        (["--url", "http://x", "--concurrency", "1,a"], "not a list of integers"),
        (["--url", "http://x", "--concurrency", "0"], ">= 1"),
        (["--url", "http://x", "--ci-width", "1.5"], "fraction"),
        (["--url", "http://x", "--endpoint", "grpc"], "invalid choice"),
        (["--url", "http://x", "--max-tokens", "-3"], ">= 1"),
        (["--url", "http://x", "--min-duration", "9", "--max-duration", "3"], "must not exceed"),
        (["--url", "http://x", "--workload", "sharegpt"], "unknown workload"),
        (["--url", "http://x", "--workload", "/nonexistent.jsonl"], "not found"),
        (["--url", "http://x", "--engine", "tgi"], "unknown engine 'tgi'"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        code = main(argv)
        raise SystemExit(code)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("autotune bench: ")


def test_json_lines_one_per_level(capsys: pytest.CaptureFixture[str]) -> None:
    with server_process(ServerConfig(rate=300)) as proc:
        code = main(
            ["--url", proc.url, "--concurrency", "1,2", "--max-tokens", "30",
             "--min-duration", "0.5", "--max-duration", "1", "--json"]
        )  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["concurrency"] for r in rows] == [1, 2]
    assert all(r["output_throughput"] > 0 and r["workload"] == "natural" for r in rows)


def test_table_and_failed_level(capsys: pytest.CaptureFixture[str]) -> None:
    config = ServerConfig(rate=300, fail_every=1, fail_mode="http500")
    with server_process(config) as proc:
        code = main(["--url", proc.url, "--concurrency", "1", "--min-duration", "1"])
    out = capsys.readouterr().out
    assert code == 1
    assert "out tok/s" in out and "failed: warmup failed" in out and "HTTP 500" in out
