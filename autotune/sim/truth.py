"""The true value of every config of a study on the simulated server.

When the target is autotune's simulator, its noise-free model says what each
config of the search space is worth under the study's own objective and
constraints. The demo check and the sample-efficiency benchmark compare what a
study found with this optimum. It answers the same question as
`autotune sim --predict --space FILE`, in process and scored like a study.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.config import Config, ObjectiveConfig
from autotune.errors import AutotuneError
from autotune.sim import args as sim_args
from autotune.sim import model
from autotune.sim.predict import benchmark_input_len, launch_with, resolved_params
from autotune.sim.profiles import Profile, get_profile
from autotune.unit import unitfile


@dataclass(frozen=True)
class Truth:
    config: dict[str, Any]
    """The config as proposed (the space's values)."""
    resolved: dict[str, Any] | None
    """As the server would run it; None when it refuses to start."""
    feasible: bool
    values: tuple[float, ...]
    """Objective value(s) as the study computes them; 0 for an infeasible config."""
    levels: tuple[dict[str, Any], ...] = ()
    reason: str | None = None

    @property
    def value(self) -> float:
        return self.values[0]


def sim_args_of_unit(unit_text: str) -> sim_args.SimArgs:
    """The simulator's arguments in a unit that runs `autotune sim` or `-m autotune.sim`."""
    argv = unitfile.parse_exec_start(unit_text).argv
    for i, word in enumerate(argv):
        if word == "sim" and i > 0 and argv[i - 1].endswith("autotune"):
            return sim_args.parse(argv[i + 1 :])
        if word == "autotune.sim" and i > 0 and argv[i - 1] == "-m":
            return sim_args.parse(argv[i + 1 :])
    raise AutotuneError("the target's unit does not run the simulator (autotune sim)")


def study_truth(
    cfg: Config, unit_text: str, profile: str | None = None, workload: str | None = None
) -> list[Truth]:
    """Every config of `cfg.space`, scored by the simulator's model like the study scores it."""
    parsed = sim_args_of_unit(unit_text)
    prof = get_profile(profile or parsed.sim.profile)
    configs = [c.params for c in cfg.space.enumerate() if c.valid]
    settings = {
        "workload": workload or _sim_workload(cfg.benchmark.workload),
        "max_tokens": cfg.benchmark.max_tokens,
        "input_len": benchmark_input_len(cfg.benchmark.workload, cfg.benchmark.endpoint),
    }
    if all(p.flag and p.type != "bool" and p.file is None for p in cfg.space.params.values()):
        return space_truth(
            prof, parsed.launch, configs, cfg.objective, cfg.benchmark.concurrency, **settings
        )
    # Switches, environment variables and companion files: the launch is what the patched
    # unit, its environment and its files give the server, as in a real deployment.
    return [
        config_truth(
            prof,
            deployed_launch(cfg, unit_text, config),
            config,
            cfg.objective,
            cfg.benchmark.concurrency,
            **settings,
        )
        for config in configs
    ]


def deployed_launch(cfg: Config, unit_text: str, config: dict[str, Any]) -> model.Launch:
    """The simulator's launch for `config` deployed: the patched unit's flags and the
    companion files' text (0.5.23 reads no environment variable the simulator models)."""
    unit_dir = "/autotune-truth"
    patched = cfg.space.patch_unit(unit_text, config, unit_dir=unit_dir)
    argv = unitfile.parse_exec_start(patched).argv
    start = next(i for i, w in enumerate(argv) if w in ("sim", "autotune.sim")) + 1
    parsed = sim_args.parse(argv[start:])
    files = cfg.space.files(config, unit_dir)
    path = parsed.launch.speculative_adaptive_config
    if path is not None and files.get(path) is not None:
        return dataclasses.replace(parsed.launch, adaptive_config_text=files[path])
    return parsed.launch


def space_truth(
    profile: Profile,
    base: model.Launch,
    configs: Sequence[dict[str, Any]],
    objective: ObjectiveConfig,
    levels: Sequence[int],
    *,
    workload: str,
    max_tokens: int,
    input_len: int,
) -> list[Truth]:
    algorithm = base.speculative_algorithm or profile.default_algorithm
    out = []
    for config in configs:
        launch = launch_with(base, config, algorithm)
        out.append(
            config_truth(
                profile,
                launch,
                config,
                objective,
                levels,
                workload=workload,
                max_tokens=max_tokens,
                input_len=input_len,
            )
        )
    return out


def config_truth(
    profile: Profile,
    launch: model.Launch,
    config: dict[str, Any],
    objective: ObjectiveConfig,
    levels: Sequence[int],
    *,
    workload: str,
    max_tokens: int,
    input_len: int,
) -> Truth:
    n_values = len(levels) if objective.mode == "pareto" else 1
    zero = (0.0,) * n_values
    resolved = model.resolve(profile, launch)
    if isinstance(resolved, model.Refusal):
        return Truth(config, None, False, zero, reason=resolved.reason)
    if resolved.late_failure is not None:
        return Truth(config, None, False, zero, reason=resolved.late_failure.reason)
    per_level = tuple(
        model.predict_level(profile, resolved, c, workload, max_tokens, input_len) for c in levels
    )
    c = objective.constraints
    floor = c.min_running_requests
    reason = None
    if floor is not None and resolved.max_running_requests < floor:
        reason = f"max_running_requests {resolved.max_running_requests} < {floor}"
    elif c.max_ttft_p99_ms is not None and _worst(per_level, "ttft_ms") > c.max_ttft_p99_ms:
        reason = "ttft above the ceiling"
    elif c.max_itl_p50_ms is not None and _worst(per_level, "tpot_ms") > c.max_itl_p50_ms:
        reason = "inter-token latency above the ceiling"
    tput = [float(x["output_throughput"]) for x in per_level]
    if objective.mode == "geomean":
        values: tuple[float, ...] = (math.exp(sum(math.log(t) for t in tput) / len(tput)),)
    elif objective.mode == "single":
        values = (tput[list(levels).index(objective.level)],)
    else:
        values = tuple(tput)
    return Truth(config, resolved_params(resolved), reason is None, values, per_level, reason)


def optimum(table: Sequence[Truth]) -> Truth:
    feasible = [t for t in table if t.feasible]
    if not feasible:
        raise AutotuneError("no config of the space is feasible on this simulator profile")
    return max(feasible, key=lambda t: t.value)


def _sim_workload(name: str) -> str:
    return "greedy" if name == "greedy" else "natural"


def _worst(levels: Sequence[dict[str, Any]], key: str) -> float:
    return max(float(x[key]) for x in levels)
