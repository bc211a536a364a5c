"""How the simulated server refuses a launch: SGLang's exception, message and the tail of its
traceback, at the stage of startup where the real one dies."""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.engines import sglang_facts

OOM_MESSAGE = sglang_facts.OOM_MESSAGES[0].text


@dataclass(frozen=True, slots=True)
class Refusal:
    """A config the server refuses; `stage` says when in the startup it dies."""

    stage: str  # "args" (before loading) | "memory" (KV allocation) | "graph" (capture)
    exception: str  # e.g. "AssertionError", "RuntimeError"
    message: str
    frames: tuple[tuple[str, str], ...] = field(default=())  # (location, code) traceback tail

    @property
    def reason(self) -> str:
        return f"{self.exception}: {self.message}" if self.message else self.exception


ALGORITHM_FRAMES = (
    (
        "sglang/srt/arg_groups/speculative_hook.py, in handle_speculative_decoding",
        "algo = SpeculativeAlgorithm.from_string(cfg.speculative_algorithm)",
    ),
    (
        "sglang/srt/speculative/spec_info.py, in from_string",
        'raise ValueError(f"Unknown speculative algorithm name: {name}")',
    ),
)
ADAPTIVE_FRAMES = (
    ("sglang/srt/server_args.py, in __post_init__", "self._handle_speculative_decoding()"),
    (
        "sglang/srt/speculative/adaptive_spec_params.py, in load_adaptive_config",
        "raise ValueError(",
    ),
)


def assertion() -> Refusal:
    return Refusal(
        "args",
        "AssertionError",
        "",
        (
            ("sglang/srt/server_args.py, in __post_init__", "self._handle_speculative_decoding()"),
            (
                "sglang/srt/server_args.py, in _handle_speculative_decoding",
                "assert (\n            self.speculative_eagle_topk is None\n"
                "            and self.speculative_num_draft_tokens is None\n        )",
            ),
        ),
    )


def oom(mem_fraction: float) -> Refusal:
    return Refusal(
        "memory",
        "RuntimeError",
        f"{OOM_MESSAGE} Current value: mem_fraction_static={mem_fraction}",
        (
            ("sglang/srt/model_executor/model_runner.py, in initialize", "self.init_memory_pool("),
            (
                "sglang/srt/model_executor/model_runner.py, in init_memory_pool",
                "raise RuntimeError(",
            ),
        ),
    )


def tree_too_small(steps: int, topk: int, draft: int) -> Refusal:
    limit = steps * topk + 1
    return Refusal(
        "graph",
        "RuntimeError",
        "Capture cuda graph failed: the draft tree has at most speculative_num_steps * "
        f"speculative_eagle_topk + 1 = {limit} tokens, but speculative_num_draft_tokens = "
        f"{draft}",
        (
            ("sglang/srt/speculative/eagle_worker.py, in __init__", "self.init_cuda_graphs()"),
            (
                "sglang/srt/speculative/eagle_draft_cuda_graph_runner.py, in capture",
                "CudaGraphRunner.capture(self)",
            ),
        ),
    )
