"""What autotune believes about SGLang, per release, and where in its source each belief lives.

The adapter (`engines/sglang.py`) and the simulator (`sim/`) read these names instead of
holding strings of their own, and `tests/conformance/` checks every one of them against the
real wheels (`pip download --no-deps sglang==X`, read as text: importing sglang needs torch
and a GPU). A belief the wheel contradicts fails there with the wheel's file and line, so a
new release is checked by adding its number to `CHECKED`.

Releases differ in what a deployer sees (boundaries found by reading every 2026 wheel,
0.5.6 … 0.5.23):

- 0.5.10: the parser's prog becomes `sglang serve` (before: the script's name), so an
  argparse refusal reads `sglang serve: error: …`;
- 0.5.13: the counter `sglang:spec_verify_calls_total` appears on `/metrics`;
- 0.5.14: `SGLANG_ENABLE_SPEC_V2` is gone; spec v2 (the overlap scheduler) is the default;
- 0.5.16: `srt/mem_cache/allocation_sizing.py`: a request's decode step allocates
  `max(steps * topk, draft_tokens)` KV slots;
- 0.5.17: hybrid (mamba) models cap `max_running_requests` by the state cache, with a warning;
- 0.5.20: `GET /ready` and `launch_command` in `/server_info`.

`/server_info` exists in every supported release; `/get_server_info` answers too but logs a
deprecation WARNING on every call.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ADAPTIVE_CANDIDATE_STEPS",
    "ALGORITHMS",
    "CHECKED",
    "DEPRECATED_SERVER_INFO_WARNING",
    "DRAFTS_HISTOGRAM_KEY",
    "DRAFT_ADJUSTED_WARNING",
    "KNOWN_SIMULATOR_DIFFERENCES",
    "MAMBA_CAP_WARNING",
    "MAX_RUNNING_RESET_WARNING",
    "METRICS",
    "NEWEST",
    "OLDEST",
    "OOM_MESSAGES",
    "PARSER_PROG",
    "READY_LINE",
    "TIER_SWITCH",
    "UNKNOWN_ALGORITHM",
    "Since",
    "decode_alloc_tokens",
    "decode_capture_sizes",
    "in_range",
    "version_key",
]

#: The releases autotune supports: the oldest whose formats the adapter still reads, and the
#: newest one read. A server outside them gets one warning line (`engines/sglang.py`).
OLDEST = "0.5.6"
NEWEST = "0.5.23"
#: The wheels the conformance suite reads in CI: both ends and one across most boundaries.
CHECKED = ("0.5.6", "0.5.16", "0.5.23")
#: The release the simulator speaks (docs/rehearsal.md).
SIMULATED = NEWEST


def version_key(version: str) -> tuple[int, ...]:
    """(0, 5, 23) for "0.5.23", "0.5.23.post1" or "v0.5.23rc0"; () when it is no version."""
    parts: list[int] = []
    for part in version.strip().lstrip("v").split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if digits != part:
            break
    return tuple(parts[:3])


def in_range(version: str) -> bool | None:
    """Whether `version` is a supported release; None when it cannot be read as one."""
    key = version_key(version)
    if len(key) < 3:
        return None
    return version_key(OLDEST) <= key <= version_key(NEWEST)


@dataclass(frozen=True)
class Since:
    """A string SGLang prints, from release `since` on, in `file` (a path inside the wheel).

    `text` is the message as a template: `{}` where the source formats a value (an f-string
    field or a `%d`/`%s` of logging); the conformance suite renders the source the same way.
    """

    text: str
    file: str
    since: str = OLDEST


# --------------------------------------------------------------------------- the parser
#: argparse's prog from 0.5.10 on (srt/server_args.py, prepare_server_args); older builds
#: print the script's name (`launch_server.py: error: …`).
PARSER_PROG = Since('"sglang serve"', "sglang/srt/server_args.py", "0.5.10")

# --------------------------------------------------------------------------- log lines
READY_LINE = Since(
    "The server is fired up and ready to roll!", "sglang/srt/entrypoints/http_server.py"
)
DRAFT_ADJUSTED_WARNING = Since(
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
    "when speculative_eagle_topk == 1",
    "sglang/srt/arg_groups/speculative_hook.py",
    "0.5.16",
)
MAX_RUNNING_RESET_WARNING = Since(
    "Max running requests is reset to 48 for speculative decoding. You can override "
    "this by explicitly setting --max-running-requests.",
    "sglang/srt/arg_groups/speculative_hook.py",
    "0.5.16",
)
#: Hybrid models: the state cache's limit on running requests (kv_cache_configurator.py).
MAMBA_CAP_WARNING = Since(
    "max_running_requests is capped to {} by the mamba state cache (max_mamba_cache_size={}, "
    "{} state slots per request). To raise it: increase --mamba-full-memory-ratio or "
    "--max-mamba-cache-size, or halve the state size with --mamba-ssm-dtype bfloat16.",
    "sglang/srt/mem_cache/kv_cache_configurator.py",
    "0.5.17",
)
DEPRECATED_SERVER_INFO_WARNING = Since(
    "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
    "Please use '/server_info' instead.",
    "sglang/srt/entrypoints/http_server.py",
)

# --------------------------------------------------------------------------- refusals
#: An unknown --speculative-algorithm (no argparse choices): SpeculativeAlgorithm.from_string.
UNKNOWN_ALGORITHM = Since(
    "Unknown speculative algorithm name: {}", "sglang/srt/speculative/spec_info.py"
)
#: The built-in algorithm names the simulator accepts (all of them SGLang's).
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")

# --------------------------------------------------------------------------- out of memory
#: Every startup message that means "this config does not fit in memory": the classifier
#: calls each `out_of_memory`, so the sampler learns the memory boundary from it.
OOM_MESSAGES = (
    Since(
        "Not enough memory. Please try to increase --mem-fraction-static.",
        "sglang/srt/model_executor/pool_configurator.py",
        "0.5.16",
    ),
    Since(
        "Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
        "max_mamba_cache_size={}, mamba_ratio={}, resulting max_num_reqs={}. Try: (1) reduce "
        "--max-running-requests, (2) increase --mem-fraction-static, or (3) use GPUs with "
        "more memory.",
        "sglang/srt/mem_cache/kv_cache_configurator.py",
        "0.5.17",
    ),
    Since(
        "Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
        "max_mamba_cache_size={} (total_rest_memory={} GB, mamba_cache_per_req={} MB). "
        "Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, "
        "(3) reduce --speculative-num-draft-tokens, or (4) use GPUs with more memory.",
        "sglang/srt/mem_cache/kv_cache_configurator.py",
        "0.5.23",
    ),
    Since(
        "SWA pool cap ({} tokens, {} GiB) leaves no room for the full KV pool within the "
        "available {} GiB. Reduce --max-running-requests, lower SGLANG_SWA_EVICTION_INTERVAL, "
        "or increase --mem-fraction-static.",
        "sglang/srt/model_executor/pool_configurator.py",
        "0.5.23",
    ),
    Since(
        "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={}. "
        "Raise --mem-fraction-static above {} (minimum viable = 1 - available/pre = {}). If "
        "using speculative decoding, draft weights are now counted.",
        "sglang/srt/mem_cache/kv_cache_configurator.py",
        "0.5.23",
    ),
)

# --------------------------------------------------------------------------- metrics
#: Names on `/metrics` (with --enable-metrics) that the adapter reads or the simulator
#: exports, each with the release it appeared in (srt/metrics/collector.py, later
#: srt/observability/metrics_collector.py).
METRICS: dict[str, str] = {
    "sglang:generation_tokens_total": OLDEST,
    "sglang:prompt_tokens_total": OLDEST,
    "sglang:num_requests_total": OLDEST,
    "sglang:spec_verify_calls_total": "0.5.13",
    "sglang:num_running_reqs": OLDEST,
    "sglang:num_used_tokens": OLDEST,
    "sglang:token_usage": OLDEST,
    "sglang:gen_throughput": OLDEST,
    "sglang:num_queue_reqs": OLDEST,
    "sglang:cache_hit_rate": OLDEST,
    "sglang:spec_accept_length": OLDEST,
    "sglang:spec_accept_rate": OLDEST,
    "sglang:max_total_num_tokens": OLDEST,
    "sglang:spec_num_steps": "0.5.16",
}

# --------------------------------------------------------------------------- caches
#: Empties the radix cache and NGRAM's corpus of earlier requests (srt/entrypoints/
#: http_server.py; the scheduler's flush also clears the draft worker's pool). 200 when
#: done; 400 while requests run or wait. `?timeout=` (seconds to wait for idle) from 0.5.16;
#: 0.5.6 ignores it.
#: The adaptive controller moving to another tier, or a batch routed to another entry's
#: state (srt/speculative/eagle_worker_v2.py, apply_runtime_state; logged on rank 0). Read
#: to mark switch points on the changing-load phase.
TIER_SWITCH = Since(
    "Switch adaptive runtime state: steps {} -> {}, draft_tokens {} -> {}",
    "sglang/srt/speculative/eagle_worker_v2.py",
    "0.5.16",
)
FLUSH_CACHE = "/flush_cache"
FLUSH_CACHE_ROUTE = Since(
    '@app.api_route("/flush_cache", methods=["GET", "POST"])',
    "sglang/srt/entrypoints/http_server.py",
)
FLUSH_CACHE_WAIT = Since(
    "async def flush_cache(timeout: float = Query(0.0, ge=0.0)):",
    "sglang/srt/entrypoints/http_server.py",
    "0.5.16",
)

# --------------------------------------------------------------------------- per request
#: The native `/generate` response's per-request count of verify steps that accepted exactly
#: 0, 1, 2, ... drafts (srt/managers/tokenizer_manager.py; read in 0.5.16 and 0.5.23, absent
#: in 0.5.6): acceptance per position, which the performance model reads
#: (`autotune/search/perf/acceptance.py`).
DRAFTS_HISTOGRAM_KEY = "spec_correct_drafts_histogram"
DRAFTS_HISTOGRAM = Since(DRAFTS_HISTOGRAM_KEY, "sglang/srt/managers/tokenizer_manager.py", "0.5.16")

# --------------------------------------------------------------------------- adaptive
#: DEFAULT_ADAPTIVE_CONFIG's candidate steps per batch-size lower bound
#: (srt/speculative/adaptive_spec_params.py, 0.5.23).
ADAPTIVE_CANDIDATE_STEPS: dict[int, tuple[int, ...]] = {
    1: (1, 3, 5, 7),
    8: (0, 1, 3),
    32: (0, 1),
    64: (0,),
}


# --------------------------------------------------------------------------- memory
def decode_alloc_tokens(steps: int, topk: int, draft: int) -> int:
    """KV slots one running request takes per decode step with EAGLE-style speculation:
    `max(spec_steps * spec_topk, spec_tokens)` (srt/mem_cache/allocation_sizing.py, 0.5.16
    on; 0.5.23 lines 38-53, for page size 1 or a chain; a paged tree reserves whole pages
    per branch, which no shipped space deploys). The simulator sizes its pools by it and
    every search space's `memory_per_request` states it, both checked against the wheels
    (tests/conformance/test_sglang_wheels.py)."""
    return max(steps * topk, draft)


# --------------------------------------------------------------------------- CUDA graphs
def decode_capture_sizes(max_bs: int, *, speculative: bool) -> tuple[int, ...]:
    """The decode CUDA-graph batch sizes SGLang 0.5.23 captures up to `max_bs`
    (srt/arg_groups/cuda_graph_hook.py, generate_decode_cuda_graph_batch_sizes): with
    speculation less padding at small batches."""
    if speculative:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8),
                 *range(272, max_bs + 1, 16)]  # fmt: skip
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16),
                 *range(512, max_bs + 1, 32)]  # fmt: skip
    out = [b for b in sizes if b <= max_bs]
    if max_bs not in out:
        out.append(max_bs)
    return tuple(out)


# --------------------------------------------------------------------------- not yet simulated
#: Where the simulator still speaks an older build than SIMULATED; each one is checked to
#: still differ (tests/conformance), so fixing one means removing it here and in
#: docs/rehearsal.md.
KNOWN_SIMULATOR_DIFFERENCES = (
    "hybrid models: the mamba state cache is sized by the simulator's calibrated state "
    "model (state per request grows with the tokens a decode step allocates), not by "
    "0.5.23's fixed share of the memory left (--mamba-full-memory-ratio 0.9), which with "
    "the KV drop the calibration measured would give 26 -> 18 running requests, not 21; "
    "the cap and its warning line are 0.5.23's",
)


#: Model bytes loaded per second, start to ready (docs/calibration.md: Qwen3.5-122B-A10B,
#: taken as BF16's 244 GB, in 90-100 s per restart on 4 RTX PRO 6000): `autotune init` and
#: `validate`'s estimate before the first trial measures the load.
LOAD_BYTES_PER_S = 244e9 / 95
#: The simulator's start before its `--sim-load-time` (measured: the demo's trials were
#: ready 1.1 s after the start with 1.5 s of load at 4x speed).
SIM_START_S = 0.7
