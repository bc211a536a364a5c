"""`autotune bench`: the tuner's load generator, on any running OpenAI-compatible server."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO

from autotune import log
from autotune.bench import defaults as d
from autotune.bench.protocol import ENDPOINTS
from autotune.bench.result import LevelResult, LevelSettings
from autotune.bench.runner import LevelFailed, run_level
from autotune.bench.workload import Workload, load_workload
from autotune.engines import Counters, Engine, get_engine
from autotune.errors import AutotuneError, ConfigError

API_KEY_ENV = "AUTOTUNE_API_KEY"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, no usage dump: the message names the bad argument.
        self.exit(2, f"autotune bench: {message} (see --help)\n")


def _parser() -> _Parser:
    p = _Parser(
        prog="autotune bench",
        description=(
            "Closed-loop streaming benchmark: output tokens/s counted from the server's own "
            "usage over a steady-state window, at each concurrency level."
        ),
    )
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    # A study's own defaults (`benchmark:` in autotune.yaml), so that a benchmark by hand
    # measures what a trial measures.
    levels = ",".join(str(c) for c in d.CONCURRENCY)
    p.add_argument(
        "--concurrency",
        default=levels,
        type=_concurrencies,
        help=f"comma-separated concurrency levels (default {levels})",
    )
    p.add_argument(
        "--workload",
        default=d.WORKLOAD,
        help=f"natural | greedy (upper bound) | random[:N] | FILE.jsonl (default {d.WORKLOAD})",
    )
    p.add_argument(
        "--max-tokens", type=_positive_int, default=d.MAX_TOKENS, help=f"default {d.MAX_TOKENS}"
    )
    p.add_argument(
        "--min-duration",
        type=_positive_float,
        default=d.MIN_DURATION,
        help=f"seconds, default {d.MIN_DURATION:g}",
    )
    p.add_argument(
        "--max-duration",
        type=_positive_float,
        default=d.MAX_DURATION,
        help=f"seconds, default {d.MAX_DURATION:g}",
    )
    p.add_argument(
        "--ci-width",
        type=_ci_width,
        default=d.CI_WIDTH,
        help=f"stop when the 95%% CI half-width is within this fraction (default {d.CI_WIDTH}; "
        "0 = always run --min-duration)",
    )
    p.add_argument("--endpoint", choices=tuple(ENDPOINTS), default=d.ENDPOINT)
    p.add_argument("--model", default=None, help="model name (default: first of /v1/models)")
    p.add_argument("--api-key", default=None, help=f"bearer token (default: ${API_KEY_ENV} if set)")
    p.add_argument("--timeout", type=_positive_float, default=300.0, help="per request, s")
    p.add_argument("--seed", type=int, default=0, help="prompt order (default 0)")
    p.add_argument("--json", action="store_true", help="one JSON object per level on stdout")
    p.add_argument(
        "--engine",
        default=None,
        help="read this engine's own counters around each level (llama.cpp: /metrics) and "
        "show the server's token count and draft acceptance next to the client's",
    )
    return p


def _concurrencies(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"levels must be integers >= 1: {text!r}")
    return values


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _ci_width(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value == 0:
        return None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1), or 0: {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.url.startswith(("http://", "https://")):
        parser.error(f"--url must start with http:// or https://: {args.url!r}")
    if args.min_duration > args.max_duration:
        parser.error("--min-duration must not exceed --max-duration")
    try:
        workload = load_workload(args.workload, max_tokens=args.max_tokens, seed=args.seed)
    except ConfigError as exc:
        print(f"autotune bench: {exc}", file=sys.stderr)
        return 2
    log.setup("WARNING")
    engine = None
    if args.engine is not None:
        try:
            engine = get_engine(args.engine)
        except ConfigError as exc:
            print(f"autotune bench: --engine: {exc.problem}", file=sys.stderr)
            return 2
    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    try:
        return asyncio.run(_run(args, workload, api_key, engine))
    except KeyboardInterrupt:
        print("autotune bench: interrupted", file=sys.stderr)
        return 130
    except AutotuneError as exc:
        print(f"autotune bench: {exc}", file=sys.stderr)
        return exc.exit_code


async def _run(
    args: argparse.Namespace, workload: Workload, api_key: str | None, engine: Engine | None
) -> int:
    out: TextIO = sys.stdout
    show_progress = sys.stderr.isatty()
    if not args.json:
        print(_header(args, workload), file=out)
        print(_row_header(), file=out)
    failed = 0
    for concurrency in args.concurrency:
        settings = LevelSettings(
            concurrency=concurrency,
            min_duration_s=args.min_duration,
            max_duration_s=args.max_duration,
            ci_width=args.ci_width,
            request_timeout_s=args.timeout,
        )
        before = await engine.counters(args.url, api_key) if engine is not None else None
        try:
            result = await run_level(
                args.url,
                args.model,
                workload,
                settings,
                api_key=api_key,
                endpoint=args.endpoint,
                on_progress=_progress_line if show_progress else None,
            )
        except LevelFailed as exc:
            failed += 1
            _clear_progress(show_progress)
            if args.json:
                row: dict[str, Any] = {"concurrency": concurrency, "error": exc.reason}
                if exc.result is not None:
                    row = {**exc.result.to_dict(), "error": exc.reason}
                print(json.dumps(row), file=out, flush=True)
            else:
                print(f"{concurrency:>6}  failed: {exc.reason}", file=out, flush=True)
            continue
        _clear_progress(show_progress)
        row = result.to_dict()
        after = await engine.counters(args.url, api_key) if engine is not None else None
        server = after.since(before) if after is not None and before is not None else None
        if server is not None:
            row["server"] = {
                "output_tokens": server.output_tokens,
                "draft_tokens": server.draft_tokens,
                "accepted_tokens": server.accepted_tokens,
                "accept_length": server.accept_length,
                "draft_acceptance": server.acceptance,
                "acceptance_per_position": server.acceptance_per_position,
            }
        if args.json:
            print(json.dumps(row), file=out, flush=True)
        else:
            print(_row(result), file=out, flush=True)
            if server is not None:
                print(f"        server: {_server_line(result, server)}", file=out)
            elif engine is not None:
                print(f"        server: {engine.name} exposes no counters here", file=out)
            for note in result.notes:
                print(f"        note: {note}", file=out)
    return 1 if failed else 0


def _server_line(result: LevelResult, server: Counters) -> str:
    """The server's own counts next to the client's, over the whole level (warmup included)."""
    parts = []
    if server.output_tokens is not None:
        diff = (result.sent_output_tokens - server.output_tokens) / max(server.output_tokens, 1)
        parts.append(
            f"{server.output_tokens:.0f} output tokens (client {result.sent_output_tokens}, "
            f"{diff:+.1%})"
        )
    if server.accept_length is not None:
        parts.append(f"accept length {server.accept_length:.2f}")
    if server.acceptance is not None:
        parts.append(f"{server.acceptance:.1%} of drafted tokens accepted")
    if server.acceptance_per_position is not None:
        rates = ", ".join(f"{r:.2f}" for r in server.acceptance_per_position)
        parts.append(f"by position {rates}")
    return ", ".join(parts) or "no counts"


def _header(args: argparse.Namespace, workload: Workload) -> str:
    return (
        f"{args.url} {ENDPOINTS[args.endpoint]}  workload {workload.name}: "
        f"{workload.description}; max_tokens {workload.max_tokens}"
    )


_COLUMNS: Sequence[tuple[str, int]] = (
    ("conc", 6),
    ("out tok/s", 10),
    ("±95%", 6),
    ("total tok/s", 11),
    ("req/s", 7),
    ("TTFT p50", 9),
    ("p99 ms", 8),
    ("ITL p50", 8),
    ("p99 ms", 8),
    ("TPOT p50", 9),
    ("tok/chunk", 9),
    ("window s", 8),
    ("reqs", 6),
    ("err", 4),
    ("degen", 6),
)


def _row_header() -> str:
    return "  ".join(name.rjust(width) for name, width in _COLUMNS)


def _row(r: LevelResult) -> str:
    cells = (
        str(r.concurrency),
        f"{r.output_throughput:.1f}",
        f"{r.ci_halfwidth:.1%}",
        f"{r.total_throughput:.1f}",
        f"{r.request_rate:.2f}",
        _num(r.ttft_ms_p50),
        _num(r.ttft_ms_p99),
        _num(r.itl_ms_p50),
        _num(r.itl_ms_p99),
        _num(r.tpot_ms_p50),
        f"{r.tokens_per_chunk:.2f}",
        f"{r.window_s:.1f}",
        str(r.requests),
        str(r.errors),
        f"{r.degenerate_share:.0%}",
    )
    return "  ".join(cell.rjust(width) for cell, (_, width) in zip(cells, _COLUMNS, strict=True))


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _progress_line(status: dict[str, Any]) -> None:
    ci = status.get("ci")
    text = (
        f"  c={status.get('concurrency', '?')} {status.get('phase')}: "
        f"{status.get('elapsed_s', 0):.0f}s, {status.get('requests', 0)} requests, "
        f"{status.get('tok_s') or 0:.0f} tok/s" + (f", CI ±{ci:.1%}" if ci is not None else "")
    )
    sys.stderr.write("\r" + text.ljust(78)[:78])
    sys.stderr.flush()


def _clear_progress(shown: bool) -> None:
    if shown:
        sys.stderr.write("\r" + " " * 78 + "\r")
        sys.stderr.flush()
