"""Load generator: closed-loop streaming benchmark of an OpenAI-compatible or SGLang server.

    workload = load_workload("natural", max_tokens=512)
    result = await run_level(url, None, workload, LevelSettings(concurrency=16))
    result.output_throughput, result.to_dict()

Token counts are the server's own (streamed `usage` or native `meta_info`),
never SSE chunks; throughput is measured over a steady-state window in which
all C request slots are busy. See docs/benchmark.md.
"""

from autotune.bench.deck import PromptDeck
from autotune.bench.result import LevelResult, LevelSettings
from autotune.bench.runner import GiveUpFn, LevelFailed, run_level
from autotune.bench.workload import Workload, load_workload

__all__ = [
    "GiveUpFn",
    "LevelFailed",
    "LevelResult",
    "LevelSettings",
    "PromptDeck",
    "Workload",
    "load_workload",
    "run_level",
]
