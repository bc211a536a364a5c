"""The simulator's performance model: pure functions, no I/O, cheap to call.

The HTTP server and `--predict` both use these functions, so a throughput
measured over HTTP and the predicted one come from the same numbers.

Shape of the model (see docs/rehearsal.md for the reasoning):
- memory: weights and a spec workspace come off the static fraction; what
  is left holds KV tokens and, on hybrid (linear attention) models, one
  recurrent-state slot per running request whose cost grows with the draft
  tree. Speculation therefore costs KV tokens *and* running requests.
- decode: one iteration = draft steps + one verify forward of batch x draft
  tokens. MoE verify cost saturates as more tokens touch more experts, then
  grows with compute; draft cost grows with batch x topk.
- acceptance: a chain of per-depth guesses, widened by topk within the
  draft-token budget; greedy repetitive text is accepted more than natural text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from autotune.engines import sglang_facts
from autotune.sim import adaptive, lengths, refusals, tree
from autotune.sim.profiles import EASY_SHARE, HARD_FACTOR, Acceptance, Profile
from autotune.sim.refusals import Refusal

GiB = float(1 << 30)
SPEC_DEFAULT_MAX_RUNNING = 48
AUTO_KNOBS = (3, 1, 4)  # SGLang's choice when only the algorithm is given
CHUNKED_PREFILL_SIZE = 8192
MAX_PREFILL_TOKENS = 16384
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
ALGORITHMS = sglang_facts.ALGORITHMS
WORKLOADS = ("greedy", "natural")

DRAFT_ADJUSTED_WARNING = sglang_facts.DRAFT_ADJUSTED_WARNING.text
MAX_RUNNING_RESET_WARNING = sglang_facts.MAX_RUNNING_RESET_WARNING.text
#: 0.5.23 runs spec v2 (the overlap scheduler) unless --disable-overlap-schedule.
NON_OVERLAP_WARNING = (
    "Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative decoding."
)
MAMBA_CAP_WARNING = sglang_facts.MAMBA_CAP_WARNING.text
ADAPTIVE_DISABLED_WARNING = (
    "speculative_adaptive disabled: {reason}. Falling back to static speculative params."
)
NGRAM_DRAFT_WARNING = (
    "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding."
)
NGRAM_CHUNK_WARNING = (
    "The mixed chunked prefill are disabled because of using ngram speculative decoding."
)
NGRAM_DEFAULTS = {"min_bfs_breadth": 1, "max_bfs_breadth": 10, "match_type": "BFS",
                  "max_trie_depth": 18, "capacity": 10_000_000, "draft": 12}  # fmt: skip
#: The n-gram drafter's chance to guess right: from the text, not the model. Greedy
#: benchmark text (temperature 0, no EOS) repeats itself; chat replies rarely do.
NGRAM_GREEDY = Acceptance(top=0.9916, horizon=4.463, spread=7.036, width_miss=0.8)
NGRAM_NATURAL = Acceptance(top=0.9936, horizon=-2.499, spread=3.233, width_miss=0.88)
#: A prompt NGRAM's corpus has seen since the last /flush_cache: the trie holds its earlier
#: answer, and a sampled reply follows much of it. Assumed, not measured on SGLang: sized so
#: a natural reply's throughput grows about as llama.cpp's ngram-mod did on a second pass
#: over the same prompts (74 -> 114 tok/s, 1.5x).
NGRAM_REPLAY = Acceptance(top=0.9885, horizon=1.450, spread=4.443, width_miss=0.85)
#: CPU time of one trie lookup per running request (ms); no draft forward at all.
NGRAM_LOOKUP_MS = 0.04
#: Share of the speculative bookkeeping (`t_spec`) that is host-side work the overlap
#: scheduler (spec v2) can run while the GPU verifies; with `t_batch` per request.
OVERLAP_CPU_SHARE = 0.5
#: Mamba state slots per running request (kv_cache_configurator._calculate_mamba_ratio,
#: 0.5.23): the extra_buffer strategy's 3, plus 2 tracking slots under the overlap
#: scheduler; without overlap SGLang picks no_buffer, 3.
MAMBA_SLOTS_OVERLAP = 5
MAMBA_SLOTS = 3


@dataclass(frozen=True, slots=True)
class Launch:
    """The launch flags the model cares about, as given (None = not given)."""

    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    max_running_requests: int | None = None
    mem_fraction_static: float | None = None
    cuda_graph_max_bs: int | None = None
    speculative_adaptive: bool = False
    speculative_adaptive_config: str | None = None
    """The config file's path as given."""
    adaptive_config_text: str | None = None
    """Its content, read at launch (None with a path: the file could not be read)."""
    disable_overlap_schedule: bool = False
    """Spec v2 without the overlap scheduler (0.5.23 overlaps by default)."""
    speculative_ngram_min_bfs_breadth: int | None = None
    speculative_ngram_max_bfs_breadth: int | None = None
    speculative_ngram_match_type: str | None = None
    speculative_ngram_max_trie_depth: int | None = None
    speculative_ngram_capacity: int | None = None


@dataclass(frozen=True, slots=True)
class Spec:
    """Resolved knobs; steps == 0 means speculation is off (except for NGRAM, whose
    bookkeeping steps are draft // topk and may be 0)."""

    steps: int = 0
    topk: int = 1
    draft: int = 1
    ngram: bool = False
    max_depth: int = 64
    """NGRAM: the trie's depth, the longest draft chain it can match."""

    @property
    def on(self) -> bool:
        return self.steps > 0 or self.ngram


def chain(steps: int) -> Spec:
    """An adaptive tier: topk 1, steps + 1 draft tokens (0 steps: no drafting)."""
    return Spec(steps, 1, steps + 1) if steps > 0 else Spec()


@dataclass(frozen=True, slots=True)
class Ngram:
    """NGRAM's resolved knobs, as /get_server_info reports them."""

    min_bfs_breadth: int
    max_bfs_breadth: int
    match_type: str
    max_trie_depth: int
    capacity: int


@dataclass(frozen=True, slots=True)
class Resolved:
    """What the server really runs: resolved knobs and the capacity it found."""

    algorithm: str | None
    spec: Spec
    max_running_requests: int
    max_total_num_tokens: int
    mem_fraction_static: float
    cuda_graph_max_bs: int
    context_len: int
    available_gpu_mem: float
    kv_size_gb: float  # K size (V is the same)
    warnings: tuple[str, ...] = ()
    # Failures that only show after the weights are loaded (graph capture).
    late_failure: Refusal | None = None
    adaptive: adaptive.Config | None = None
    """Adaptive speculation's config when it is on (`spec` is then the initial tier)."""
    overlap: bool = False
    """Spec v2: the overlap scheduler prepares the next batch while the GPU runs this one."""
    ngram: Ngram | None = None
    pool_warnings: tuple[str, ...] = ()
    """Lines the memory pools print once the weights are loaded (the mamba cap)."""


# -- launch -> resolved -------------------------------------------------------
def resolve(profile: Profile, launch: Launch) -> Resolved | Refusal:
    """Apply SGLang's argument rules and size the memory pools, or refuse."""
    warnings: list[str] = []
    algorithm = launch.speculative_algorithm.upper() if launch.speculative_algorithm else None
    spec = Spec()
    reserve = spec  # what memory is sized for: the largest adaptive tier
    max_running = launch.max_running_requests
    config: adaptive.Config | None = None
    ngram: Ngram | None = None
    if algorithm is not None and algorithm not in ALGORITHMS:
        return Refusal(
            "args",
            "ValueError",
            sglang_facts.UNKNOWN_ALGORITHM.text.format(algorithm),
            refusals.ALGORITHM_FRAMES,
        )
    if algorithm == "NEXTN":
        algorithm = "EAGLE"
    adaptive_on = algorithm is not None and launch.speculative_adaptive
    if adaptive_on:
        reason = _adaptive_unsupported(str(algorithm), launch.speculative_eagle_topk)
        if reason is not None:
            adaptive_on = False
            warnings.append(ADAPTIVE_DISABLED_WARNING.format(reason=reason))
    if algorithm == "NGRAM":
        resolved_ngram = _ngram(launch, warnings)
        if isinstance(resolved_ngram, Refusal):
            return resolved_ngram
        spec, ngram = resolved_ngram
        if max_running is None:
            max_running = SPEC_DEFAULT_MAX_RUNNING
            warnings.insert(0, MAX_RUNNING_RESET_WARNING)
        reserve = spec
    elif algorithm is not None:
        knobs = _eagle(launch, adaptive_on, warnings)
        if isinstance(knobs, Refusal):
            return knobs
        spec, reserve, config, max_running = knobs
    return _sized(
        profile, launch, _Chosen(algorithm, spec, reserve, config, ngram), max_running, warnings
    )


@dataclass(frozen=True)
class _Chosen:
    """What the argument rules settled on, before the memory pools are sized."""

    algorithm: str | None
    spec: Spec
    reserve: Spec
    adaptive: adaptive.Config | None
    ngram: Ngram | None


def _eagle(
    launch: Launch, adaptive_on: bool, warnings: list[str]
) -> tuple[Spec, Spec, adaptive.Config | None, int | None] | Refusal:
    """EAGLE's knobs as SGLang settles them (auto choices, the chain rule, an adaptive
    start), what memory is reserved for, and the running cap; or its refusal."""
    steps = launch.speculative_num_steps
    topk = launch.speculative_eagle_topk
    draft = launch.speculative_num_draft_tokens
    config: adaptive.Config | None = None
    if adaptive_on:
        loaded = _adaptive_config(launch)
        if isinstance(loaded, Refusal):
            return loaded
        config = loaded
        union = config.union
        if steps is None:
            # SGLang starts in the middle candidate, as a chain.
            steps = union[len(union) // 2]
            topk, draft = 1, steps + 1
        elif steps not in union:
            return Refusal(
                "args",
                "ValueError",
                f"--speculative-num-steps={steps} is not in the adaptive config "
                f"candidate_steps {list(union)}. Pass one of those values.",
                refusals.ADAPTIVE_FRAMES,
            )
    if steps is None:
        if topk is not None or draft is not None:
            return refusals.assertion()
        steps, topk, draft = AUTO_KNOBS
    if topk is None or draft is None:
        # SGLang fills a missing knob from its auto choice before the checks.
        topk = AUTO_KNOBS[1] if topk is None else topk
        draft = steps + 1 if draft is None else draft
    for name, v in (
        ("speculative_num_steps", steps),
        ("speculative_eagle_topk", topk),
        ("speculative_num_draft_tokens", draft),
    ):
        if v < 1:
            return Refusal("args", "ValueError", f"{name} must be positive, got {v}")
    max_running = launch.max_running_requests
    if max_running is None:
        max_running = SPEC_DEFAULT_MAX_RUNNING
        warnings.append(MAX_RUNNING_RESET_WARNING)
    if launch.disable_overlap_schedule:
        warnings.append(NON_OVERLAP_WARNING)
    if topk == 1 and draft != steps + 1:
        warnings.append(DRAFT_ADJUSTED_WARNING)
        draft = steps + 1
    spec = Spec(steps, topk, draft)
    reserve = spec
    if config is not None:
        top = max(config.union)
        reserve = chain(top) if top > steps else spec
    return spec, reserve, config, max_running


def _sized(
    profile: Profile, launch: Launch, chosen: _Chosen, max_running: int | None, warnings: list[str]
) -> Resolved | Refusal:
    """The memory pools for what was chosen, and the server as it would come up."""
    spec = chosen.spec
    mfs = launch.mem_fraction_static or profile.default_mem_fraction
    cap = max_running if max_running is not None else profile.nospec_max_running
    graph_bs = min(launch.cuda_graph_max_bs or profile.default_graph_bs, cap)
    pools = capacity(
        profile, chosen.reserve, mfs, cap, graph_bs, overlap=not launch.disable_overlap_schedule
    )
    if isinstance(pools, Refusal):
        return pools
    kv_tokens, running = pools.max_total_num_tokens, pools.max_running_requests
    late = None
    if spec.on and not spec.ngram and spec.draft > spec.steps * spec.topk + 1:
        late = refusals.tree_too_small(spec.steps, spec.topk, spec.draft)
    return Resolved(
        algorithm=chosen.algorithm,
        spec=spec,
        max_running_requests=running,
        max_total_num_tokens=kv_tokens,
        mem_fraction_static=mfs,
        cuda_graph_max_bs=graph_bs,
        context_len=profile.context_len,
        # What graphs and buffers leave of the non-static share; 0.531 makes the
        # default profile print the 7.41 GB its real deployment printed.
        available_gpu_mem=round(profile.gpu_mem_gb * (1.0 - mfs) * 0.531, 2),
        kv_size_gb=round(kv_tokens * profile.kv_bytes_per_token / 2 / GiB, 2),
        warnings=tuple(warnings),
        late_failure=late,
        adaptive=chosen.adaptive,
        overlap=spec.on and not launch.disable_overlap_schedule,
        ngram=chosen.ngram,
        pool_warnings=pools.warnings,
    )


def _adaptive_unsupported(algorithm: str, topk: int | None) -> str | None:
    """Why SGLang turns adaptive speculation off for this launch (it falls back to static)."""
    if algorithm not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algorithm} (only EAGLE/EAGLE3 are supported)"
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    return None


def _adaptive_config(launch: Launch) -> adaptive.Config | Refusal:
    path = launch.speculative_adaptive_config
    if path is not None and launch.adaptive_config_text is None:
        message = f"[Errno 2] No such file or directory: {path!r}"
        return Refusal("args", "FileNotFoundError", message, refusals.ADAPTIVE_FRAMES)
    try:
        return adaptive.parse(launch.adaptive_config_text if path else None, path)
    except adaptive.ConfigRefused as refused:
        return Refusal("args", refused.exception, refused.message, refusals.ADAPTIVE_FRAMES)


def _ngram(launch: Launch, warnings: list[str]) -> tuple[Spec, Ngram] | Refusal:
    d = NGRAM_DEFAULTS

    def given(value: Any, key: str) -> Any:
        return d[key] if value is None else value

    n = Ngram(
        int(given(launch.speculative_ngram_min_bfs_breadth, "min_bfs_breadth")),
        int(given(launch.speculative_ngram_max_bfs_breadth, "max_bfs_breadth")),
        str(given(launch.speculative_ngram_match_type, "match_type")).upper(),
        int(given(launch.speculative_ngram_max_trie_depth, "max_trie_depth")),
        int(given(launch.speculative_ngram_capacity, "capacity")),
    )
    draft = launch.speculative_num_draft_tokens
    if draft is None:
        draft = int(d["draft"])
        warnings.append(NGRAM_DRAFT_WARNING)
    warnings.append(NGRAM_CHUNK_WARNING)
    for name, v in (
        ("speculative_num_draft_tokens", draft),
        ("speculative_ngram_min_bfs_breadth", n.min_bfs_breadth),
        ("speculative_ngram_max_bfs_breadth", n.max_bfs_breadth),
        ("speculative_ngram_max_trie_depth", n.max_trie_depth),
    ):
        if v < 1:
            return Refusal("args", "ValueError", f"{name} must be positive, got {v}")
    if n.match_type not in ("BFS", "PROB"):
        return Refusal(
            "args",
            "ValueError",
            f"speculative_ngram_match_type must be BFS or PROB, got {n.match_type!r}",
        )
    # server_args: topk := max BFS breadth, steps := draft // topk (bookkeeping only: the
    # drafter fills up to `draft` tokens from the trie in one go).
    topk = n.max_bfs_breadth
    return Spec(draft // topk, topk, draft, ngram=True, max_depth=n.max_trie_depth), n


@dataclass(frozen=True, slots=True)
class Pools:
    max_total_num_tokens: int
    max_running_requests: int
    warnings: tuple[str, ...] = ()


def alloc_len(spec: Spec) -> int:
    """KV slots one running request takes per decode step (the engine's rule,
    `sglang_facts.decode_alloc_tokens`); 1 without speculation."""
    if not spec.on:
        return 1
    return sglang_facts.decode_alloc_tokens(spec.steps, spec.topk, spec.draft)


def capacity(
    profile: Profile,
    spec: Spec,
    mem_fraction: float,
    max_running: int,
    graph_bs: int,
    *,
    overlap: bool = True,
) -> Pools | Refusal:
    """The pools' sizes, or an out-of-memory refusal.

    `max_running` is the requested (or defaulted) cap; `graph_bs` sizes the CUDA-graph
    workspace (per batch slot and per token a decode step allocates) carved out before the
    pools. `overlap` is the scheduler's mode: the hybrid models' state slots per request.
    """
    rest_gb = mem_fraction * profile.gpu_mem_gb - profile.weights_gb - profile.overhead_gb
    unit = float(profile.kv_bytes_per_token)
    per_step = alloc_len(spec) if spec.on else 0
    if spec.on and not spec.ngram:
        rest_gb -= profile.draft_weights_gb
        unit *= 1.0 + profile.draft_kv_fraction
    pool = rest_gb * GiB / unit - graph_bs * per_step * profile.workspace_tokens
    if pool <= 0:
        return refusals.oom(mem_fraction)
    warnings: tuple[str, ...] = ()
    if profile.state_tokens > 0:
        # Hybrid (linear attention) models: every running request holds recurrent state
        # slots, plus snapshots per token a decode step drafts to roll rejected ones back.
        # The pool plans one request per `slot` KV tokens unless a smaller cap was asked
        # for, so a bigger step costs KV tokens and running requests together. (0.5.23
        # sizes the mamba cache as a fixed share of memory instead; with the KV drop the
        # calibration measured, that share would give 26 -> 18, not the measured 21.)
        state = profile.state_tokens + profile.state_spec_tokens * per_step
        if max_running * (profile.slot_tokens + state) <= pool:
            running = max_running
            kv = pool - running * state
        else:
            kv = pool * profile.slot_tokens / (profile.slot_tokens + state)
            running = int(kv // profile.slot_tokens)
            # The cap SGLang 0.5.17+ reports: max_mamba_cache_size // slots per request
            # (extra_buffer: 3, plus 2 tracking slots under the overlap scheduler).
            slots = MAMBA_SLOTS_OVERLAP if overlap else MAMBA_SLOTS
            size = int(kv * slots / profile.slot_tokens)
            if running < max_running:
                warnings = (MAMBA_CAP_WARNING.format(running, size, slots),)
    else:
        # Pure attention: requests cost only the KV they use (0.5.23 reserves none per
        # request at startup); SGLang caps the count at half the tokens.
        kv = pool
        running = min(max_running, int(kv // profile.slot_tokens))
    if kv < 1 or running < 1:
        return refusals.oom(mem_fraction)
    return Pools(int(kv), running, warnings)


# -- acceptance ---------------------------------------------------------------
def accept_dist(profile: Profile, spec: Spec, workload: str) -> tuple[float, ...]:
    """P(tokens emitted per verify step = 1, 2, ...): the bonus token counts."""
    if not spec.on:
        return (1.0,)
    if spec.ngram:
        acc = {"greedy": NGRAM_GREEDY, "replay": NGRAM_REPLAY}.get(workload, NGRAM_NATURAL)
        # The trie drafts up to `draft` tokens, one chain as deep as it matches, widened
        # up to the BFS breadth where the budget allows.
        depth = min(spec.max_depth, spec.draft - 1)
        return _accept_dist(acc, depth, spec.topk, spec.draft)
    acc = profile.greedy if workload == "greedy" else profile.natural
    return _accept_dist(acc, spec.steps, spec.topk, spec.draft)


def accept_length(profile: Profile, spec: Spec, workload: str) -> float:
    return _mean(accept_dist(profile, spec, workload))


@lru_cache(maxsize=8192)
def _accept_dist(acc: Acceptance, steps: int, topk: int, draft: int) -> tuple[float, ...]:
    if min(steps, draft - 1) <= 0:
        return (1.0,)
    # Easy and hard decode steps mixed (profiles.EASY_SHARE): each class's own tree.
    easy = tree.accept_dist(acc.alphas(steps), topk, draft, acc.width_miss)
    hard = tree.accept_dist(acc.alphas(steps, HARD_FACTOR), topk, draft, acc.width_miss)
    return _mixed([(EASY_SHARE, easy), (1.0 - EASY_SHARE, hard)])


def tiers(
    profile: Profile, resolved: Resolved, batch: float, workload: str
) -> list[tuple[float, Spec]]:
    """(share of decode iterations, knobs) at a steady batch: one entry for a static config;
    adaptive speculation's tiers as its controller settles on this workload."""
    config = resolved.adaptive
    if config is None:
        return [(1.0, resolved.spec)]
    entry = config.entry_for(max(1, round(batch)), adaptive.routing_sizes())

    def accepted(steps: int) -> float:
        return accept_length(profile, chain(steps), workload) - 1.0

    shares = adaptive.occupancy(entry, resolved.spec.steps, accepted)
    return [(w, chain(s)) for s, w in shares.items()]


def _mixed(dists: Sequence[tuple[float, Sequence[float]]]) -> tuple[float, ...]:
    size = max(len(d) for _, d in dists)
    out = [0.0] * size
    for w, d in dists:
        for i, p in enumerate(d):
            out[i] += w * p
    return tuple(out)


def _mean(dist: Sequence[float]) -> float:
    return sum((i + 1) * p for i, p in enumerate(dist))


def _cv(dist: Sequence[float]) -> float:
    m = _mean(dist)
    m2 = sum((i + 1) ** 2 * p for i, p in enumerate(dist))
    return math.sqrt(max(m2 - m * m, 0.0)) / m


def accept_rate(spec: Spec, length: float) -> float:
    """Share of drafted depth that was accepted, as the decode log reports it."""
    if spec.ngram:
        return (length - 1.0) / max(1, spec.draft - 1)
    return (length - 1.0) / spec.steps if spec.on else 0.0


# -- time ----------------------------------------------------------------------
def iteration_time(
    profile: Profile, spec: Spec, batch: float, kv_tokens: float, *, overlap: bool = False
) -> float:
    """Seconds of one decode iteration for `batch` requests reading `kv_tokens` of KV.

    `overlap` (spec v2): the host-side part (scheduling per request, part of the
    speculative bookkeeping) runs while the GPU works, so the iteration lasts the longer
    of the two instead of their sum.
    """
    if batch <= 0:
        return 0.0
    n = batch * spec.draft if spec.on else batch
    t = (
        profile.t_fixed
        + profile.t_experts * (1.0 - (1.0 - profile.expert_share) ** n)
        + profile.t_token * n
        + profile.t_kv * kv_tokens / 1000.0
        + profile.t_batch * batch
    )
    host = OVERLAP_CPU_SHARE * profile.t_batch * batch
    if spec.ngram:
        t += profile.t_spec + NGRAM_LOOKUP_MS * batch
        host += OVERLAP_CPU_SHARE * profile.t_spec + NGRAM_LOOKUP_MS * batch
        if spec.topk > 1:
            t += profile.t_tree
    elif spec.on:
        draft_step = profile.t_draft + profile.t_draft_token * batch * spec.topk
        extend = profile.t_draft + profile.t_draft_token * n
        t += spec.steps * draft_step + extend + profile.t_spec
        host += OVERLAP_CPU_SHARE * profile.t_spec
        if spec.topk > 1:
            t += profile.t_tree + profile.t_tree_request * batch
    if overlap:
        t = max(t - host, host)
    return t / 1000.0


def prefill_time(profile: Profile, tokens: int) -> float:
    """Seconds of one prefill batch of `tokens` new tokens (chunked: linear in tokens)."""
    if tokens <= 0:
        return 0.0
    return (profile.t_prefill_fixed + profile.t_prefill_token * tokens) / 1000.0


# -- steady state of a closed loop ---------------------------------------------
def predict_level(
    profile: Profile,
    resolved: Resolved,
    concurrency: int,
    workload: str = "greedy",
    max_tokens: int = 256,
    input_len: int = 200,
) -> dict[str, Any]:
    """Noise-free steady state of `concurrency` clients sending back-to-back requests.

    Every running request decodes in every iteration; each finished request
    is replaced by a new one whose prefill stalls the batch once.
    """
    batch = max(1, min(concurrency, resolved.max_running_requests))
    mix = tiers(profile, resolved, batch, workload)
    dist = _mixed([(w, accept_dist(profile, s, workload)) for w, s in mix])
    length = _mean(dist)
    mean_out, m2 = lengths.length_moments(workload, max_tokens)
    steps = lengths.expected_decode_steps(dist, workload, max_tokens)
    ctx = input_len + m2 / (2.0 * mean_out)
    t_prefill = prefill_time(profile, input_len)

    def t_iter_at(b: float) -> float:
        return sum(
            w * iteration_time(profile, s, b, b * ctx, overlap=resolved.overlap) for w, s in mix
        )

    if 1 < concurrency <= resolved.max_running_requests:
        # Nobody queues, so a finished request's slot stays empty for the iteration that
        # starts before its client's next request arrives (the scheduler never waits for
        # one): each slot decodes `steps` of every `steps + 1` iterations, which then run
        # with a slightly smaller batch.
        decoding = batch * steps / (steps + 1.0)
        t_iter = t_iter_at(decoding)
        cycle = (steps + 1.0) * t_iter + batch * t_prefill
    else:
        # A queued request takes a freed slot at once; alone, the engine waits for it idle.
        t_iter = t_iter_at(batch)
        cycle = steps * t_iter + batch * t_prefill
    throughput = batch * mean_out / cycle
    req_rate = batch / cycle
    queue_wait = max(0, concurrency - batch) / req_rate
    out: dict[str, Any] = {
        "concurrency": concurrency,
        "batch": batch,
        "output_throughput": round(throughput, 2),
        "request_throughput": round(req_rate, 4),
        "accept_length": round(length, 4),
        # P(tokens emitted per verify step = 1, 2, ...): SGLang's histogram of accepted drafts.
        "accept_dist": [round(p, 6) for p in dist],
        # Spread of the tokens one verify step emits, relative to their mean: how noisy a
        # throughput measurement over a few seconds is (autotune/testservers/cost.py).
        "accept_cv": round(_cv(dist), 4),
        "accept_rate": round(sum(w * accept_rate(sp, length) for w, sp in mix), 4),
        "iteration_ms": round(t_iter * 1000.0, 3),
        "tpot_ms": round((cycle - t_prefill) / max(mean_out - 1.0, 1.0) * 1000.0, 3),
        "ttft_ms": round((queue_wait + t_prefill + t_iter / 2.0) * 1000.0, 2),
        "mean_output_tokens": round(mean_out, 2),
        "max_running_requests": resolved.max_running_requests,
        "max_total_num_tokens": resolved.max_total_num_tokens,
    }
    if resolved.adaptive is not None:
        # Where the controller settles at this load: {steps: share of decode iterations}.
        out["adaptive_steps"] = {str(sp.steps): round(w, 3) for w, sp in mix}
    return out
