"""The results as one markdown document: a row per cell and candidate, then the verdicts."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autotune.config import BenchmarkConfig

from . import foreign, replay
from .cells import Cell, landscape
from .grid import BATCH_SIZES, grid_on_space, sglang_grid
from .metrics import REGRET_AT, Stats
from .run import APPLIED_AT

FINALISTS = BenchmarkConfig().finalists
FINALIST_ROUNDS = BenchmarkConfig().finalist_rounds

#: The issue's bar, per cell of the full space.
MAX_MEDIAN, MAX_P90 = 15, 25
FULL_SPACE = "sglang-eagle"


@dataclass(frozen=True)
class Verdict:
    cell: Cell
    ok: bool
    why: str


def sweep_size() -> int:
    """Server launches of SGLang's sweep with its default batch sizes: the grid's size."""
    return len(sglang_grid()) * len(BATCH_SIZES)


def verdicts(
    results: Mapping[tuple[Cell, str], Stats], candidate: str, budget: int
) -> list[Verdict]:
    """The issue's bar for one candidate, per cell of the full space."""
    out = []
    for cell in sorted({c for c, _ in results if c.space == FULL_SPACE}):
        mine = results.get((cell, candidate))
        if mine is None:
            continue
        problems = []
        if mine.t98_median > MAX_MEDIAN:
            problems.append(f"median {_n(mine.t98_median, budget)} > {MAX_MEDIAN}")
        if mine.t98_p90 > MAX_P90:
            problems.append(f"p90 {_n(mine.t98_p90, budget)} > {MAX_P90}")
        rnd = results.get((cell, "random"))
        # When the baseline is already there (1 trial) nothing can take half of it.
        if rnd is not None and mine.t98_median > max(1.0, rnd.t98_median / 2):
            problems.append(
                f"median {_n(mine.t98_median, budget)} > half of random's "
                f"{_n(rnd.t98_median, budget)}"
            )
        if mine.t98_median > sweep_size() / 10:
            problems.append(f"median > a tenth of SGLang's sweep ({sweep_size()} launches)")
        out.append(Verdict(cell, not problems, "; ".join(problems) or "meets the bar"))
    return out


def markdown(
    results: Mapping[tuple[Cell, str], Stats],
    candidates: Sequence[str],
    *,
    budget: int,
    provenance: Sequence[str],
) -> str:
    cells = sorted({c for c, _ in results})
    lines = [
        "# Sample efficiency: deployments until the declared best is worth 98 % of the optimum",
        "",
        *provenance,
        "",
        "Rebuilt whole from each cell's raw results (`experiments/results/raw/efficiency/`, one "
        "file per cell): `make bench-efficiency` runs every cell; "
        "`experiments/sample_efficiency.py "
        "--cells NAME` reruns one and rebuilds the table; `--rebuild` only rebuilds it.",
        "",
        "- A trial here is a deployment: deployment 1 is the unit's current config, SGLang's "
        "own choice for the model (steps, topk, draft) = (5, 4, 8) for Llama and (3, 1, 4) "
        "for the others; proposals the study answers from an earlier result cost nothing "
        "and are not counted.",
        "- Declared best: what `autotune best` would name after that deployment (the GP's "
        "pick among the measured feasible trials, see `study.update_model_best`), before any "
        "finalist is measured again.",
        "- median / p90: nearest rank over the seeds (that share of studies had got there); "
        "in brackets the median's 95 % interval (order statistics, distribution-free: with few "
        f"seeds it is wide, and two candidates whose intervals overlap are not told apart); "
        f"`>{budget}`: not within the budget. found: median deployments until a config worth "
        "98 % had been deployed at all (what a noise-free study would have declared).",
        "- reached: share of studies that got there. infeasible: share of deployments on "
        "refused or infeasible configs. regret@N: mean shortfall of the declared best after N "
        "deployments. Declared best and optimum are both judged by the noise-free model.",
        f"- applied@N: share of studies whose end, played out after N deployments, applies a "
        f"config worth 98 %: autotune's finalist stage measures the top {FINALISTS} configs "
        f"again, round after round, until the leader is the best with 95 % probability "
        f"(at most {FINALIST_ROUNDS} rounds), and applies it. finalist runs@N: the "
        "deployments that took, on average.",
        *[f"- {note}" for note in _space_notes(cells)],
        "",
        "- GPU-h: GPU-hours until the declared best is worth 98 % (median / p90 over the "
        "seeds): every deployment is charged its model load and the benchmark levels it ran "
        "(`autotune/testservers/cost.py`), times the profile's GPUs.",
        "",
        "| cell | configs (feasible, >=98 %) | candidate | median | p90 | GPU-h | found | reached "
        "| infeasible | "
        + " | ".join(f"regret@{n}" for n in REGRET_AT)
        + " | "
        + " | ".join(f"applied@{n}" for n in APPLIED_AT)
        + " | "
        + " | ".join(f"finalist runs@{n}" for n in APPLIED_AT)
        + " |",
        "|---|---|---|---|---|---|---|---|---|" + "---|" * (len(REGRET_AT) + 2 * len(APPLIED_AT)),
    ]
    for cell in cells:
        shape = _shape(cell)
        for name in candidates:
            s = results.get((cell, name))
            if s is None:
                continue
            regret = " | ".join(f"{100 * r:.1f} %" for r in s.regret)
            applied = " | ".join(f"{100 * a:.0f} %" for a in s.applied)
            applied += " | " + " | ".join(f"{r:.1f}" for r in s.finalist_runs)
            lines.append(
                f"| {cell.label} | {shape} | {name} | {_n(s.t98_median, budget)} "
                f"({_n(s.t98_median_ci[0], budget)}-{_n(s.t98_median_ci[1], budget)}) "
                f"| {_n(s.t98_p90, budget)} | {_h(s.gpu_h_median)} / {_h(s.gpu_h_p90)} "
                f"| {_n(s.found_median, budget)} "
                f"| {100 * s.reached:.0f} % | {100 * s.infeasible:.0f} % | {regret} | {applied} |"
            )
            shape = ""
    lines += ["", *_summary(results, candidates, budget)]
    lines += gpu_time(results, cells)
    lines += performance_model(results, cells, budget)
    for name in ("default",):
        found = verdicts(results, name, budget)
        if not found:
            continue
        met = sum(v.ok for v in found)
        lines += ["", f"## The bar for `{name}`: {met} of {len(found)} cells", ""]
        lines += [f"- {v.cell.label}: {'OK' if v.ok else 'MISS'} — {v.why}" for v in found]
    return "\n".join(lines) + "\n"


def _shape(cell: Cell) -> str:
    land = landscape(cell)
    feasible = [t for t in land.by_key.values() if t.feasible]
    near = sum(t.value >= 0.98 * land.best.value for t in feasible)
    return f"{land.size} ({len(feasible)}, {near})"


def _space_notes(cells: Sequence[Cell]) -> list[str]:
    notes = []
    for cell in cells:
        if cell.space == foreign.SPACE:
            source = foreign.by_name(cell.profile)
            land = landscape(cell)
            if isinstance(source, foreign.Cost):
                notes.append(
                    f"`{cell.label}`: the simulator cell `{Cell(*source.base).label}` with a "
                    f"cost the model's form cannot express, as measured in {source.url} "
                    f"(`experiments/efficiency/foreign/{source.path.name}`: {source.rule}, "
                    f"x {source.factor:g})."
                )
                continue
            filled, scored = source.levels(land.cfg.benchmark.concurrency)
            notes.append(
                f"`{cell.label}`: measured by others, {source.url} "
                f"(`experiments/efficiency/foreign/{source.path.name}`): {land.size} configs, "
                f"{filled} of the {scored} values scored filled by the file's rule "
                f"({100 * filled / scored:.0f} %), drawn at {100 * source.noise:g} % noise."
            )
        if cell.space == replay.SPACE:
            land = landscape(cell)
            rec = replay.recording()
            spread = rec.spread(cell.workload)
            level = ", ".join(f"c={c} {100 * sd:.1f} %" for c, sd in sorted(spread.level.items()))
            notes.append(
                f"`{cell.label}`: the real llama-server as recorded by "
                "`experiments/llamacpp_sweep.py` "
                f"on {rec.header['date']} (`experiments/results/raw/{rec.path.name}`): {land.size} "
                f"configs, optimum {land.best.value:.1f} tok/s; drawn at the recorded spread, "
                f"per start {100 * spread.deployment:.1f} % (from {spread.redeployed} configs "
                f"deployed twice), per window {level} (from {spread.pairs} pairs); the "
                f"performance model is off there (no draft_shape)."
            )
    for space in sorted({c.space for c in cells} - {foreign.SPACE, replay.SPACE}):
        land = landscape(next(c for c in cells if c.space == space))
        grid = len(grid_on_space(land.cfg.space))
        notes.append(
            f"`{space}`: {land.size} configs. SGLang's sweep runs {len(sglang_grid())} "
            f"configs per batch size, {sweep_size()} launches with its default "
            f"{len(BATCH_SIZES)} batch sizes (the bar's grid size); on this space its "
            f"configs are {grid} distinct ones ({100 * grid / land.size:.0f} % of the space), "
            "which the grid candidate runs in SGLang's order, once."
        )
    return notes


def _summary(
    results: Mapping[tuple[Cell, str], Stats], candidates: Sequence[str], budget: int
) -> list[str]:
    lines = [
        f"## Per candidate, over the {FULL_SPACE} cells",
        "",
        "| candidate | worst median | worst p90 | cells reached by all seeds "
        "| mean regret@10 | mean regret@20 | mean infeasible |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in candidates:
        rows = [s for (c, n), s in results.items() if n == name and c.space == FULL_SPACE]
        if not rows:
            continue
        lines.append(
            f"| {name} | {_n(max(s.t98_median for s in rows), budget)} "
            f"| {_n(max(s.t98_p90 for s in rows), budget)} "
            f"| {sum(s.reached == 1.0 for s in rows)} of {len(rows)} "
            f"| {100 * sum(s.regret[0] for s in rows) / len(rows):.1f} % "
            f"| {100 * sum(s.regret[1] for s in rows) / len(rows):.1f} % "
            f"| {100 * sum(s.infeasible for s in rows) / len(rows):.0f} % |"
        )
    return lines


def gpu_time(results: Mapping[tuple[Cell, str], Stats], cells: Sequence[Cell]) -> list[str]:
    """The default against the default before pruning and capacity prediction, per cell."""
    if not any((c, "before") in results and (c, "default") in results for c in cells):
        return []
    alone = [n for n in ("no-prune", "no-predict") if any((c, n) in results for c in cells)]
    lines = [
        "",
        "## GPU time: the default against the default before it pruned and predicted",
        "",
        "GPU-hours until the declared best is worth 98 % of the optimum (median / p90 over the "
        "seeds), side by side on the same seeds; `before` is the default with `study.prune` "
        "and `study.predict_capacity` off"
        + (f"; {', '.join(alone)} turn one of them off" if alone else "")
        + ". whole study: mean GPU-hours of all 30 deployments. skipped: configs per study "
        "the capacity prediction ruled out without a restart (wrongly: feasible ones, over "
        "all seeds). pruned: deployments per study stopped after some levels (>=98 %: pruned "
        "configs worth 98 % of the optimum; optimum: the optimum itself, over all seeds).",
        "",
        "| cell | before | default | default / before | "
        + "".join(f"{n} | " for n in alone)
        + "whole study: before | "
        + "".join(f"{n} | " for n in alone)
        + "default | skipped (wrongly) | pruned (>=98 %, optimum) |",
        "|---|---|---|---|" + "---|" * (2 * len(alone)) + "---|---|---|---|",
    ]
    ratios = []
    for cell in cells:
        before, now = results.get((cell, "before")), results.get((cell, "default"))
        if before is None or now is None:
            continue
        ratio = _ratio(now.gpu_h_median, before.gpu_h_median)
        ratios.append((ratio, cell))
        others = "".join(
            f"{_h(results[(cell, n)].gpu_h_median)} | " if (cell, n) in results else "— | "
            for n in alone
        )
        whole = "".join(
            f"{_h(results[(cell, n)].gpu_h_total)} | " if (cell, n) in results else "— | "
            for n in alone
        )
        lines.append(
            f"| {cell.label} | {_h(before.gpu_h_median)} / {_h(before.gpu_h_p90)} "
            f"| {_h(now.gpu_h_median)} / {_h(now.gpu_h_p90)} | {ratio:.2f} | {others}"
            f"{_h(before.gpu_h_total)} | {whole}{_h(now.gpu_h_total)} "
            f"| {now.skipped:.1f} ({now.wrongly_skipped}) "
            f"| {now.pruned:.1f} ({now.good_pruned}, {now.optimum_pruned}) |"
        )
    finite = sorted(r for r, _ in ratios if math.isfinite(r))
    if finite:
        worst = max(ratios, key=lambda rc: rc[0])
        saved = [
            1 - results[(c, "default")].gpu_h_total / results[(c, "before")].gpu_h_total
            for _, c in ratios
            if results[(c, "before")].gpu_h_total > 0
        ]
        lines += [
            "",
            f"Whole study (30 deployments): {100 * statistics.median(saved):.0f} % less GPU "
            f"time in the median cell, {100 * max(saved):.0f} % in the best.",
        ]
        lines += [
            "",
            f"Median cell: default / before = {statistics.median(finite):.2f}; worst "
            f"cell {worst[0]:.2f} ({worst[1].label}). Optimum pruned: "
            f"{sum(results[(c, 'default')].optimum_pruned for _, c in ratios)}; feasible "
            "configs skipped by the capacity prediction: "
            f"{sum(results[(c, 'default')].wrongly_skipped for _, c in ratios)}.",
        ]
    return lines


#: The seed's own cell (issue 23's figures).
SEED_CELL = "eagle qwen natural geomean"
#: A cell is worse than today when at least this many of its paired seeds took more GPU time
#: to the target (a one-sided sign test: 15 of 20 happens by chance 2 % of the time).
WORSE_SHARE = 0.75


def performance_model(
    results: Mapping[tuple[Cell, str], Stats], cells: Sequence[Cell], budget: int
) -> list[str]:
    """The default (performance model on) against today's default, seed by seed."""
    pairs = [(c, results[(c, "today")], results[(c, "default")]) for c in cells
             if (c, "today") in results and (c, "default") in results]  # fmt: skip
    if not pairs:
        return []
    lines = [
        "",
        "## The performance model: the default against today's",
        "",
        "`today` is the default before the performance model (`study.performance_model: "
        "false`); both run the same seeds (the same noise per deployment). Deployments and "
        "GPU-hours until the declared best is worth 98 % (median / p90); infeasible: share of "
        "deployments on configs that turned out refused or infeasible; wrongly skipped: "
        "feasible configs the predictions ruled out without deploying them (all seeds); "
        "worse seeds: seeds on which the default needed more GPU time than today "
        f"(a cell counts as worse when at least {WORSE_SHARE:.0%} of them did); model on: "
        "share of the default's deployments after the baseline that the model steered, and "
        "the median of its last leave-one-out RMS error; lost: configs the default never "
        "measured because a prediction skipped them or barred them at the study's end, "
        "over all seeds (worth 98 % of the optimum / all).",
        "",
        "| cell | today: median / p90 | default: median / p90 | reached: today / default "
        "| infeasible: today / default | GPU-h: today | GPU-h: default | default / today "
        "| applied@30: today / default | wrongly skipped | worse seeds | model on (LOO) "
        "| lost >=98 % / all |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios, worse = [], []
    for cell, old, new in pairs:
        ratio = _ratio(new.gpu_h_median, old.gpu_h_median)
        ratios.append(ratio)
        seeds = sorted(set(old.gpu_h_by_seed) & set(new.gpu_h_by_seed))
        slower = sum(new.gpu_h_by_seed[k] > old.gpu_h_by_seed[k] + 1e-9 for k in seeds)
        if seeds and slower >= WORSE_SHARE * len(seeds):
            worse.append(cell.label)
        lines.append(
            f"| {cell.label} | {_n(old.t98_median, budget)} / {_n(old.t98_p90, budget)} "
            f"| {_n(new.t98_median, budget)} / {_n(new.t98_p90, budget)} "
            f"| {100 * old.reached:.0f} % / {100 * new.reached:.0f} % "
            f"| {100 * old.infeasible:.0f} % / {100 * new.infeasible:.0f} % "
            f"| {_h(old.gpu_h_median)} | {_h(new.gpu_h_median)} | {ratio:.2f} "
            f"| {100 * old.applied[-1]:.0f} % / {100 * new.applied[-1]:.0f} % "
            f"| {new.wrongly_skipped} | {slower} of {len(seeds)} "
            f"| {100 * new.model_on:.0f} % ({_loo(new.loo_rms)}) "
            f"| {new.lost_good} / {new.lost} |"
        )
    finite = [r for r in ratios if math.isfinite(r)]
    applied = min(new.applied[-1] for _, _, new in pairs)
    lines += [
        "",
        f"- Median cell: default / today = {statistics.median(finite):.2f} GPU-hours to 98 % "
        f"(best {min(finite):.2f}, worst {max(ratios):.2f}).",
        f"- Cells worse than today beyond seed-to-seed noise: {len(worse)}"
        + (f" ({', '.join(worse)})" if worse else "")
        + f"; applied@{APPLIED_AT[-1]} at least {100 * applied:.0f} % in every cell; "
        f"feasible configs ruled out by a prediction: "
        f"{sum(new.wrongly_skipped for _, _, new in pairs)}; configs worth 98 % of the "
        f"optimum skipped or barred unmeasured: {sum(new.lost_good for _, _, new in pairs)}.",
    ]
    seed = next((p for p in pairs if p[0].label == SEED_CELL), None)
    if seed is not None:
        cell, old, new = seed
        native = results.get((cell, "default-generate"))
        lines.append(
            f"- The seed's cell ({SEED_CELL}): 98 % reached in {100 * new.reached:.0f} % of "
            f"studies, median {_n(new.t98_median, budget)} deployments, p90 "
            f"{_n(new.t98_p90, budget)}, {100 * new.infeasible:.0f} % of deployments infeasible "
            f"(today: {100 * old.reached:.0f} %, {_n(old.t98_median, budget)}, "
            f"{_n(old.t98_p90, budget)}, {100 * old.infeasible:.0f} %)"
            + (
                f"; benchmarking `/generate` (acceptance per position): "
                f"{100 * native.reached:.0f} %, median {_n(native.t98_median, budget)}, p90 "
                f"{_n(native.t98_p90, budget)}, {100 * native.infeasible:.0f} % infeasible."
                if native is not None
                else "."
            )
        )
    return lines


def _loo(rms: float | None) -> str:
    return "-" if rms is None else f"{100 * rms:.1f} %"


def _ratio(a: float, b: float) -> float:
    if math.isinf(a) and math.isinf(b):
        return 1.0
    if math.isinf(a) or b == 0:
        return math.inf
    return a / b


def _h(x: float) -> str:
    """GPU-hours to three significant digits; `never` when not within the budget."""
    if math.isinf(x):
        return "never"
    return f"{x:.3g}"


def _n(x: float, budget: int | None = None) -> str:
    if math.isinf(x):
        return f">{budget}" if budget else "never"
    return f"{x:.0f}"
