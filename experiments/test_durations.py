"""Where the suite's time goes: pytest's durations report grouped by test and by folder.

    .venv/bin/pytest -n 2 --dist loadfile --durations=0 -vv > experiments/results/raw/suite.txt
    .venv/bin/python experiments/test_durations.py experiments/results/raw/suite.txt

pytest reports setup, call and teardown as separate lines; a test's figure here is their sum,
so a session fixture's start shows on the first test that asked for it (that is the cost the
suite pays). A folder's figure is the sum of its tests' seconds, the time it holds a worker;
the suite's wall time is printed from pytest's own last line. `--top N` sets how many of the
slowest tests are listed (40 by default). `--weights tests/durations.json` also writes the
seconds per file that tests/helpers/scheduling.py hands out longest first.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

# "12.34s call     tests/deploy/test_ssh_auth.py::test_x[param]"
_LINE = re.compile(r"^\s*(?P<s>\d+(?:\.\d+)?)s\s+(?P<phase>setup|call|teardown)\s+(?P<id>\S.*)$")
# "==== 1003 passed, 2 skipped in 1824.11s (0:30:24) ===="
_SUMMARY = re.compile(r"^=+ (?P<counts>.*) in (?P<s>\d+(?:\.\d+)?)s\b")


def parse(text: str) -> tuple[dict[str, float], str | None, float | None]:
    """Seconds per test id (phases summed), pytest's counts line and its wall seconds."""
    per_test: dict[str, float] = defaultdict(float)
    counts: str | None = None
    wall: float | None = None
    for line in text.splitlines():
        if match := _LINE.match(line):
            per_test[match["id"].strip()] += float(match["s"])
        elif match := _SUMMARY.match(line):
            counts, wall = match["counts"], float(match["s"])
    return dict(per_test), counts, wall


def folder_of(test_id: str) -> str:
    """'tests/deploy/test_x.py::t' -> 'tests/deploy'; a top-level test file -> 'tests'."""
    return str(Path(test_id.split("::", 1)[0]).parent)


def by_folder(per_test: dict[str, float]) -> list[tuple[str, int, float]]:
    """(folder, tests, seconds), most seconds first."""
    seconds: dict[str, float] = defaultdict(float)
    tests: dict[str, int] = defaultdict(int)
    for test_id, s in per_test.items():
        folder = folder_of(test_id)
        seconds[folder] += s
        tests[folder] += 1
    return sorted(((f, tests[f], seconds[f]) for f in seconds), key=lambda row: -row[2])


def by_file(per_test: dict[str, float]) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for test_id, s in per_test.items():
        seconds[test_id.split("::", 1)[0]] += s
    return {f: round(s, 1) for f, s in sorted(seconds.items(), key=lambda item: -item[1])}


def render(per_test: dict[str, float], counts: str | None, wall: float | None, top: int) -> str:
    lines = []
    if wall is not None:
        minutes, seconds = divmod(wall, 60)
        lines.append(f"Suite: {counts} in {wall:.0f} s ({int(minutes)} min {seconds:.0f} s wall)")
    lines.append(f"Sum of test seconds: {sum(per_test.values()):.0f} s over {len(per_test)} tests")
    lines += ["", f"The {top} slowest tests (setup + call + teardown)", ""]
    lines += ["| # | seconds | test |", "|---:|---:|---|"]
    slowest = sorted(per_test.items(), key=lambda item: -item[1])[:top]
    lines += [f"| {i} | {s:.1f} | `{t}` |" for i, (t, s) in enumerate(slowest, 1)]
    lines += ["", "Per folder", "", "| folder | tests | seconds |", "|---|---:|---:|"]
    lines += [f"| `{f}` | {n} | {s:.0f} |" for f, n, s in by_folder(per_test)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="pytest output run with --durations=0 -vv")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--weights", type=Path, help="write seconds per file here (JSON)")
    args = parser.parse_args(argv)
    try:
        text = args.report.read_text(errors="replace")
    except OSError as exc:
        print(f"{args.report}: cannot read ({exc.strerror})", file=sys.stderr)
        return 2
    per_test, counts, wall = parse(text)
    if not per_test:
        print(
            f"{args.report}: no durations lines (run pytest with --durations=0 -vv)",
            file=sys.stderr,
        )
        return 2
    print(render(per_test, counts, wall, args.top))
    if args.weights:
        try:
            args.weights.write_text(json.dumps(by_file(per_test), indent=1) + "\n")
        except OSError as exc:
            print(f"{args.weights}: cannot write ({exc.strerror})", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
