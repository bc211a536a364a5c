"""Ground truth for a config or a whole search space: what the simulator will deliver.

Output is JSON lines so that a benchmark or a test can compare a tuner's
findings with the true optimum without starting a server.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import yaml

from autotune.sim import api, model
from autotune.sim.args import ArgError, PredictOptions
from autotune.sim.profiles import Profile

KNOB_NAMES = (
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)
_LAUNCH_FIELDS = {f.name: f for f in dataclasses.fields(model.Launch)}


def predict_config(
    profile: Profile,
    launch: model.Launch,
    concurrency: tuple[int, ...],
    workload: str = "greedy",
    max_tokens: int = 256,
    input_len: int = 200,
) -> tuple[model.Resolved | model.Refusal, list[dict[str, Any]]]:
    """Resolve one launch config and predict every level (empty list if refused)."""
    resolved = model.resolve(profile, launch)
    if isinstance(resolved, model.Refusal):
        return resolved, []
    if resolved.late_failure is not None:
        return resolved.late_failure, []
    levels = [
        model.predict_level(profile, resolved, c, workload, max_tokens, input_len)
        for c in concurrency
    ]
    return resolved, levels


def benchmark_input_len(workload: str, endpoint: str = "chat") -> int:
    """Mean prompt tokens, as the simulator counts them, of what the benchmark sends.

    The model's cost of a request's prefill and of its KV reads grows with its
    prompt, so the truth must use the prompts really sent (the built-in natural
    set averages about 72 tokens, not the 200 of the calibration runs).
    """
    from autotune.bench.workload import load_workload  # the client's prompts, on demand

    prompts = load_workload(workload, max_tokens=1).prompts
    return round(sum(api.prompt_tokens(p, endpoint) for p in prompts) / len(prompts))


def resolved_params(resolved: model.Resolved) -> dict[str, int]:
    s = resolved.spec
    return {
        "speculative_num_steps": s.steps,
        "speculative_eagle_topk": s.topk,
        "speculative_num_draft_tokens": s.draft,
    }


def launch_with(base: model.Launch, params: Mapping[str, Any], algorithm: str) -> model.Launch:
    """`base` with a space candidate's params applied (names as /get_server_info spells them)."""
    changes: dict[str, Any] = {}
    for name, value in params.items():
        f = _LAUNCH_FIELDS.get(name)
        if f is None:
            continue  # a knob the simulator does not model does not change its numbers
        changes[name] = float(value) if name == "mem_fraction_static" else value
        if f.name in KNOB_NAMES and isinstance(value, float) and value.is_integer():
            changes[name] = int(value)
    if any(k in changes for k in KNOB_NAMES) and base.speculative_algorithm is None:
        changes["speculative_algorithm"] = algorithm
    return dataclasses.replace(base, **changes)


def space_candidates(path: str) -> Iterator[tuple[dict[str, Any], bool, str | None]]:
    """(params, valid, reason) for every distinct config of a search-space file.

    Uses autotune.space when the file is a real search space; a plain YAML list
    of {steps, topk, draft} is accepted too, for quick what-if lists.
    """
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ArgError(f"argument --space: {path}: file not found") from None
    except yaml.YAMLError as exc:
        raise ArgError(f"argument --space: {path}: not valid YAML ({exc})") from None
    if isinstance(data, list):
        for i, item in enumerate(data):
            if not isinstance(item, Mapping) or not {"steps", "topk", "draft"} <= set(item):
                raise ArgError(f"argument --space: {path}: item {i} needs steps, topk and draft")
            yield (
                {
                    "speculative_num_steps": int(item["steps"]),
                    "speculative_eagle_topk": int(item["topk"]),
                    "speculative_num_draft_tokens": int(item["draft"]),
                },
                True,
                None,
            )
        return
    from autotune.errors import ConfigError
    from autotune.space import load_space

    try:
        space = load_space(path)
        candidates = space.enumerate()
    except ConfigError as exc:
        raise ArgError(f"argument --space: {exc}") from None
    for cand in candidates:
        yield dict(cand.params), cand.valid, cand.reason


def run(profile: Profile, base: model.Launch, opts: PredictOptions, out: TextIO) -> int:
    """Print the predictions; returns the exit code."""
    input_len = opts.input_len or benchmark_input_len("natural")
    kw = {"workload": opts.workload, "max_tokens": opts.max_tokens, "input_len": input_len}
    if opts.space is None:
        resolved, levels = predict_config(profile, base, opts.concurrency, **kw)
        if isinstance(resolved, model.Refusal):
            for c in opts.concurrency:
                _emit(out, {"concurrency": c, "valid": False, "reason": resolved.reason})
            return 0
        for level in levels:
            _emit(out, {**level, "valid": True, "workload": opts.workload})
        return 0
    algorithm = base.speculative_algorithm or profile.default_algorithm
    for params, valid, reason in space_candidates(opts.space):
        record: dict[str, Any] = {"params": params, "valid": valid, "reason": reason}
        levels: list[dict[str, Any]] = []
        if valid:
            launch = launch_with(base, params, algorithm)
            resolved, levels = predict_config(profile, launch, opts.concurrency, **kw)
            if isinstance(resolved, model.Refusal):
                record.update(valid=False, reason=resolved.reason)
            else:
                record["resolved"] = resolved_params(resolved)
        record["levels"] = levels
        _emit(out, record)
    return 0


def _emit(out: TextIO, obj: Mapping[str, Any]) -> None:
    out.write(json.dumps(obj, separators=(",", ":")) + "\n")
