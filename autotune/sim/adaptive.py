"""SGLang's adaptive speculation (`--speculative-adaptive`), as the simulator runs it.

Modelled on SGLang's per-batch-size controller (PR 21599, per-batch-size configs
PR 24055, spec v2 PR 23336; sources and what is left out: docs/rehearsal.md):

- the config maps batch-size lower bounds ("1", "8", ...) to `candidate_steps`
  plus optional controller constants; top-level non-numeric keys are defaults
  shared by every entry;
- a decode batch pads its size up to the next CUDA-graph batch size and uses
  the entry with the largest key at or below it;
- each entry keeps its own state: an EMA of the accepted draft tokens per
  request (the bonus token not counted), no decision for `warmup_batches`,
  then one every `update_interval` batches: down one tier while the EMA is at
  most the lower tier - 0.5 + down_hysteresis (0.5 + down_hysteresis when the
  lower tier is 0), else up while it is above the current tier - 0.5 +
  up_hysteresis; from 0 steps it always probes the next tier up;
- topk is 1 and draft tokens are steps + 1 in every tier; memory and graphs
  are sized for the largest candidate.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: SGLang's built-in config when `--speculative-adaptive-config` is not given.
DEFAULT_CONFIG: dict[str, Any] = {
    # SGLang 0.5.23's DEFAULT_ADAPTIVE_CONFIG (srt/speculative/adaptive_spec_params.py),
    # hysteresis per entry: only the first range steps down early.
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25,
          "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
          "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
}  # fmt: skip
_CONSTANTS = {
    "ema_alpha": 0.2,
    "update_interval": 5,
    "warmup_batches": 10,
    "down_hysteresis": -0.25,
    "up_hysteresis": 0.0,
}
_ENTRY_KEYS = {"candidate_steps", "ceiling_coeff", *_CONSTANTS}


class ConfigRefused(Exception):
    """SGLang refuses the adaptive config: `exception` and `message` as it prints them."""

    def __init__(self, exception: str, message: str) -> None:
        super().__init__(message)
        self.exception = exception
        self.message = message


@dataclass(frozen=True, slots=True)
class Entry:
    """The controller of one batch-size range."""

    min_batch: int
    candidates: tuple[int, ...]
    ema_alpha: float = 0.2
    update_interval: int = 5
    warmup_batches: int = 10
    down_hysteresis: float = -0.25
    up_hysteresis: float = 0.0

    def start(self, initial_steps: int) -> int:
        """The tier a fresh slot starts in: the launch's steps if a candidate, else the middle."""
        if initial_steps in self.candidates:
            return initial_steps
        return self.candidates[len(self.candidates) // 2]


@dataclass(frozen=True, slots=True)
class Config:
    entries: tuple[Entry, ...]
    source: str | None = None
    """The config file's path (None: SGLang's built-in default)."""

    @property
    def union(self) -> tuple[int, ...]:
        return tuple(sorted({c for e in self.entries for c in e.candidates}))

    def entry_for(self, batch: int, graph_sizes: tuple[int, ...]) -> Entry:
        """The entry a decode batch of `batch` requests uses (padded to a graph size first)."""
        i = bisect_left(graph_sizes, batch)
        padded = graph_sizes[i] if i < len(graph_sizes) else batch  # () routes the raw size
        keys = [e.min_batch for e in self.entries]
        return self.entries[max(0, bisect_right(keys, padded) - 1)]

    def as_json(self) -> dict[str, Any]:
        return {
            str(e.min_batch): {
                "candidate_steps": list(e.candidates),
                **{k: getattr(e, k) for k in _CONSTANTS},
            }
            for e in self.entries
        }


def parse(text: str | None, source: str | None = None) -> Config:
    """The adaptive config from the file's text (None: the built-in default).

    Raises ConfigRefused with SGLang's own exception and message for what it refuses.
    """
    if text is None:
        data: Any = DEFAULT_CONFIG
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigRefused("json.decoder.JSONDecodeError", str(exc)) from None
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ConfigRefused(
            "ValueError", f"speculative adaptive config must be a JSON object, got {kind}"
        )
    strategy = data.get("strategy", "ema")
    if strategy not in ("ema", "throughput_aware"):
        raise ConfigRefused(
            "ValueError",
            f"speculative adaptive config 'strategy' must be 'ema' or 'throughput_aware', "
            f"got {strategy!r}",
        )
    shared = {k: v for k, v in data.items() if not k.isdigit() and k != "strategy"}
    keys = sorted((k for k in data if k.isdigit()), key=int)
    if not keys:
        raise ConfigRefused(
            "ValueError",
            "speculative_adaptive_config must contain at least one integer-string BS key, "
            'e.g. {"1": {"candidate_steps": [1,3,7]}}. Got keys: ' + repr(sorted(data)),
        )
    entries = []
    for key in keys:
        raw = data[key]
        if not isinstance(raw, dict):
            raise ConfigRefused("ValueError", f"BS {key}: entry must be a JSON object, got {raw!r}")
        cfg = {**shared, **raw}
        steps = cfg.get("candidate_steps")
        if (
            not isinstance(steps, list)
            or not steps
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps)
        ):
            raise ConfigRefused(
                "ValueError",
                f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}",
            )
        constants = {k: cfg.get(k, v) for k, v in _CONSTANTS.items()}
        entries.append(
            Entry(
                int(key),
                tuple(sorted(set(steps))),
                float(constants["ema_alpha"]),
                max(1, int(constants["update_interval"])),
                max(0, int(constants["warmup_batches"])),
                float(constants["down_hysteresis"]),
                float(constants["up_hysteresis"]),
            )
        )
    return Config(tuple(entries), source)


def ignored_keys(text: str | None) -> list[str]:
    """Keys of the config the simulator reads but does not model (`ceiling_coeff`, a
    throughput_aware strategy), for one warning line."""
    if text is None:
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return []
    out = (
        {"strategy"}
        if isinstance(data, dict) and data.get("strategy") == "throughput_aware"
        else set()
    )
    for v in data.values() if isinstance(data, dict) else ():
        if isinstance(v, dict):
            out |= {k for k in v if k not in _ENTRY_KEYS or k == "ceiling_coeff"}
    return sorted(out)


class Slot:
    """One entry's controller state: the current tier and the EMA it decides on."""

    __slots__ = ("count", "ema", "entry", "steps")

    def __init__(self, entry: Entry, initial_steps: int) -> None:
        self.entry = entry
        self.steps = entry.start(initial_steps)
        self.ema = float(self.steps - 1)
        self.count = 0

    def observe(self, accepted_drafts: float) -> int | None:
        """Feed one decode batch's mean accepted draft tokens per request; the new tier when
        the controller switches, else None."""
        e = self.entry
        if self.steps > 0:
            self.ema = (1.0 - e.ema_alpha) * self.ema + e.ema_alpha * accepted_drafts
        self.count += 1
        if self.count <= e.warmup_batches or (self.count - e.warmup_batches) % e.update_interval:
            return None
        tiers = e.candidates
        i = tiers.index(self.steps)
        new = i
        if self.steps == 0:
            new = min(i + 1, len(tiers) - 1)  # nothing drafted, nothing learnt: probe up
        else:
            while new > 0 and self.ema <= _down_threshold(tiers[new - 1], e.down_hysteresis):
                new -= 1
            if new == i:
                while new < len(tiers) - 1 and self.ema > tiers[new] - 0.5 + e.up_hysteresis:
                    new += 1
        if new == i:
            return None
        self.steps = tiers[new]
        return self.steps


def _down_threshold(lower: int, hysteresis: float) -> float:
    return (0.5 if lower == 0 else lower - 0.5) + hysteresis


def occupancy(
    entry: Entry,
    initial_steps: int,
    accepted: Callable[[int], float],
    batches: int = 4000,
) -> dict[int, float]:
    """Share of decode batches spent in each tier in steady state, the controller fed the
    mean accepted drafts of its tier each batch (`accepted(steps)`): the noise-free
    counterpart of the served controller, for `--predict` and the benchmarks."""
    slot = Slot(entry, initial_steps)
    counts: dict[int, int] = {}
    tail = batches // 2
    for n in range(batches):
        slot.observe(accepted(slot.steps) if slot.steps > 0 else 0.0)
        if n >= tail:
            counts[slot.steps] = counts.get(slot.steps, 0) + 1
    total = sum(counts.values())
    return {s: c / total for s, c in sorted(counts.items())}


def routing_sizes() -> tuple[int, ...]:
    """The sizes a batch is padded to before it picks its range: none. SGLang 0.5.23 pads
    only to an explicit `--cuda-graph-bs-decode` (eagle_worker_v2.py hands the controller
    `get_exec().graph.cuda_graph_bs_decode`, None by default), which the simulator does
    not model: batches are routed by their own size."""
    return ()


def describe(config: Config) -> str:
    """One line per entry, for the startup log."""
    return ", ".join(f"bs>={e.min_batch}: {list(e.candidates)}" for e in config.entries)
