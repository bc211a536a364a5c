"""`GET /metrics` in Prometheus text format, with SGLang's metric names.

Gauges hold the values of the last decode logging interval, as SGLang's do; counters are
cumulative since start. Every name is one SGLang 0.5.23 exports (tests/conformance), so
there is no `max_running_requests` gauge: the real server has none.
"""

from __future__ import annotations

from autotune.sim.scheduler import Scheduler

#: name -> help text, in the order they are printed.
GAUGES = {
    "num_running_reqs": "The number of running requests.",
    "num_used_tokens": "The number of used tokens.",
    "token_usage": "The token usage.",
    "gen_throughput": "The generation throughput (token/s).",
    "num_queue_reqs": "The number of requests in the waiting queue.",
    "cache_hit_rate": "The prefix cache hit rate.",
    "spec_accept_length": "The average acceptance length of speculative decoding.",
    "spec_accept_rate": "The average acceptance rate of speculative decoding.",
    "spec_num_steps": "The number of speculative steps the adaptive controller runs.",
    "max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
}
COUNTERS = {
    "prompt_tokens_total": "Number of prefill tokens processed.",
    "generation_tokens_total": "Number of generation tokens processed.",
    "num_requests_total": "Number of requests processed.",
    "spec_verify_calls_total": "Number of speculative verify forward passes.",
}


def names() -> list[str]:
    """Every metric name the simulator exports (`sglang:...`)."""
    return [f"sglang:{n}" for n in (*GAUGES, *COUNTERS)]


def render(scheduler: Scheduler, model_name: str) -> str:
    st = scheduler.stats
    total = scheduler.resolved.max_total_num_tokens
    labels = f'{{model_name="{model_name}",engine_type="unified",tp_rank="0",pp_rank="0"}}'
    gauges = {
        "num_running_reqs": len(scheduler.running),
        "num_used_tokens": scheduler.kv_used,
        "token_usage": scheduler.kv_used / total,
        "gen_throughput": st.last_gen_throughput,
        "num_queue_reqs": len(scheduler.waiting),
        "cache_hit_rate": 0.0,
        "spec_accept_length": st.last_accept_len,
        "spec_accept_rate": st.last_accept_rate,
        "spec_num_steps": scheduler.live_steps,
        "max_total_num_tokens": total,
    }
    counters = {
        "prompt_tokens_total": st.prompt_tokens,
        "generation_tokens_total": st.output_tokens,
        "num_requests_total": st.finished,
        "spec_verify_calls_total": st.verify_steps,
    }
    out: list[str] = []
    for kind, table, values in (("gauge", GAUGES, gauges), ("counter", COUNTERS, counters)):
        for name, help_text in table.items():
            out += [
                f"# HELP sglang:{name} {help_text}",
                f"# TYPE sglang:{name} {kind}",
                f"sglang:{name}{labels} {float(values[name])}",
            ]
    return "\n".join(out) + "\n"
