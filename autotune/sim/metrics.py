"""`GET /metrics` in Prometheus text format, with SGLang's metric names.

Gauges hold the values of the last decode logging interval, as SGLang's do.
"""

from __future__ import annotations

from autotune.sim.engine import Engine


def render(engine: Engine, model_name: str) -> str:
    st = engine.stats
    total = engine.resolved.max_total_num_tokens
    labels = f'{{model_name="{model_name}",engine_type="unified",tp_rank="0",pp_rank="0"}}'
    gauges = [
        ("num_running_reqs", "The number of running requests.", len(engine.running)),
        ("num_used_tokens", "The number of used tokens.", engine.kv_used),
        ("token_usage", "The token usage.", engine.kv_used / total),
        ("gen_throughput", "The generation throughput (token/s).", st.last_gen_throughput),
        ("num_queue_reqs", "The number of requests in the waiting queue.", len(engine.waiting)),
        ("cache_hit_rate", "The prefix cache hit rate.", 0.0),
        (
            "spec_accept_length",
            "The average acceptance length of speculative decoding.",
            st.last_accept_len,
        ),
        (
            "spec_accept_rate",
            "The average acceptance rate of speculative decoding.",
            st.last_accept_rate,
        ),
        ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", total),
        (
            "max_running_requests",
            "Maximum number of running requests.",
            engine.resolved.max_running_requests,
        ),
    ]
    counters = [
        ("prompt_tokens_total", "Number of prefill tokens processed.", st.prompt_tokens),
        ("generation_tokens_total", "Number of generation tokens processed.", st.output_tokens),
        ("num_requests_total", "Number of requests processed.", st.finished),
    ]
    out: list[str] = []
    for name, help_text, value in gauges:
        out += [
            f"# HELP sglang:{name} {help_text}",
            f"# TYPE sglang:{name} gauge",
            f"sglang:{name}{labels} {float(value)}",
        ]
    for name, help_text, value in counters:
        out += [
            f"# HELP sglang:{name} {help_text}",
            f"# TYPE sglang:{name} counter",
            f"sglang:{name}{labels} {float(value)}",
        ]
    return "\n".join(out) + "\n"
