"""Hardware + model profiles: the constants the performance model is built from.

Each profile is one deployment (model, draft head, GPUs). The numbers are
chosen so the model lands on measured behaviour (the default profile on
docs' calibration table) and so that the profiles disagree on *where* the
optimum lies: a tuner validated on one landscape must not pass by luck.
Times are in milliseconds, memory in GiB per GPU, KV in tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Share of decode steps whose text the draft predicts well (boilerplate, copied spans, the
#: obvious continuation); the rest are hard. The draft's confidence follows the class, so
#: SGLang's tree grows over each class's own probabilities.
EASY_SHARE = 0.7
#: A hard step's chance at every depth, relative to an easy step's.
HARD_FACTOR = 0.85


@dataclass(frozen=True, slots=True)
class Acceptance:
    """Chance that the draft's best guess at depth j (0 = the first drafted token) is the
    target's token, on an easy decode step: top / (1 + exp((j - horizon) / spread)).

    A head trained to guess a few tokens ahead holds its accuracy up to about `horizon`
    tokens and loses it over about `spread` more (a reused MTP head: a short spread). Hard
    steps (1 - EASY_SHARE of them) guess HARD_FACTOR as well at every depth, so they fail
    early: the chains that survive to depth j are mostly easy ones, and the acceptance at
    depth j given j - 1 falls more slowly than either class's alone. This law is the
    simulator's own; the performance model fits a law of its own form
    (`search/perf/acceptance.py`), which this one is not. `width_miss` is the share of the
    first guess's misses that the draft's second guess does not catch either (topk > 1);
    `sim/tree.py` spreads the rest over the further ranks.

    The parameters were fitted (2026-12-07, max error 2.5 % in accept length over chains of
    1-8 steps and trees of topk 2-8) to the curves the profiles had before, which the
    calibration tests held.
    """

    top: float
    horizon: float
    spread: float
    width_miss: float

    def alphas(self, steps: int, factor: float = 1.0) -> tuple[float, ...]:
        """The best guess's chance at depths 0 .. steps - 1, scaled by `factor`."""
        return tuple(
            factor * self.top / (1.0 + math.exp(min(50.0, (j - self.horizon) / self.spread)))
            for j in range(steps)
        )


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    summary: str
    # What the process claims to be (log lines, /get_model_info, /v1/models).
    model_path: str
    architecture: str
    draft_kind: str  # "mtp" (NEXTN head in the checkpoint) or "eagle3" (separate head)
    default_algorithm: str
    context_len: int
    tp: int
    gpu_name: str
    gpu_mem_gb: float
    weights_gb: float  # per GPU, target model
    draft_weights_gb: float  # per GPU, draft head (only loaded with speculation)
    shards: int  # safetensors files, for the loading progress bar
    eos_token_id: int
    model_type: str
    default_mem_fraction: float
    # Memory model (token-equivalents: one unit = one KV token of the target).
    kv_bytes_per_token: int  # per GPU, target layers; also what "K size"/"V size" add up to
    draft_kv_fraction: float  # the draft layer's KV as a fraction of the target's
    overhead_gb: float  # activations, graphs, NCCL buffers outside the pools
    state_tokens: float  # hybrid models: one request's recurrent state; 0 = pure attention
    state_spec_tokens: float  # extra state per drafted token (tree) for rollback
    slot_tokens: float  # hybrid models: KV tokens planned per state slot
    workspace_tokens: float  # per graph batch slot and per draft/verify token
    default_graph_bs: int
    nospec_max_running: int
    # Decode time model.
    t_fixed: float  # dense weights, attention launch, sampling: per forward
    t_experts: float  # reading every routed expert once (0 for dense models)
    expert_share: float  # routed experts per token / experts (MoE saturation)
    t_token: float  # per token in the forward (compute)
    t_kv: float  # per 1k KV tokens attended
    t_draft: float  # one draft forward, fixed part
    t_draft_token: float  # one draft forward, per token
    t_spec: float  # speculative bookkeeping per iteration (tree, verify sampling, sync)
    t_tree: float  # extra per iteration when topk > 1 (tree masks, non-chain kernels)
    t_batch: float  # scheduler cost per running request
    t_prefill_fixed: float
    t_prefill_token: float
    greedy: Acceptance
    natural: Acceptance
    t_tree_request: float = 0.0
    """Extra per running request per iteration when topk > 1: SGLang builds and applies each
    request's tree mask (`build_tree_kernel_efficient`) and re-ranks its topk x topk beam
    expansions (`select_top_k_tokens`) request by request."""


QWEN35_122B = Profile(
    name="qwen3.5-122b-a10b-mtp",
    summary=(
        "Qwen3.5-122B-A10B (hybrid linear attention MoE) with its MTP head, "
        "4x RTX PRO 6000 Blackwell, TP4 over PCIe; the calibrated default"
    ),
    model_path="Qwen/Qwen3.5-122B-A10B",
    architecture="Qwen3_5MoeForConditionalGeneration",
    draft_kind="mtp",
    default_algorithm="EAGLE",
    context_len=262144,
    tp=4,
    gpu_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
    gpu_mem_gb=94.97,
    weights_gb=59.21,
    draft_weights_gb=1.18,
    shards=39,
    eos_token_id=248046,
    model_type="qwen3_5_moe",
    default_mem_fraction=0.853,
    kv_bytes_per_token=12288,
    draft_kv_fraction=0.083,
    overhead_gb=10.72189,
    state_tokens=773.5,
    state_spec_tokens=5892.98,
    slot_tokens=17400.0,
    workspace_tokens=148.32,
    default_graph_bs=256,
    nospec_max_running=2048,
    t_fixed=11.3,
    t_experts=8.4,
    expert_share=10 / 512,
    t_token=0.185,
    t_kv=0.0011,
    t_draft=0.25,
    t_draft_token=0.003,
    t_spec=5.0,
    # No tree data was measured (calibration.md: topk 1 only). With SGLang's tree (sim/tree.py)
    # the cost of topk > 1 is per request, and a second guess that catches 65 % of a depth's
    # misses keeps what calibration.md asks of trees: they win at 1 request (+3.5 % greedy,
    # +9 % natural) and lose at 64 (-12 %, -3 %).
    t_tree=0.0,
    t_batch=0.6,
    t_prefill_fixed=1.2,
    t_prefill_token=0.052,
    greedy=Acceptance(top=1.0, horizon=3.782, spread=0.506, width_miss=0.35),
    natural=Acceptance(top=0.9757, horizon=2.158, spread=1.781, width_miss=0.55),
    t_tree_request=0.04,
)

LLAMA31_8B = Profile(
    name="llama3.1-8b-eagle3-h100",
    summary=(
        "Llama-3.1-8B-Instruct with an EAGLE3 head on one H100 80GB: cheap verify, "
        "wide trees (topk > 1) pay off at low concurrency, plenty of KV"
    ),
    model_path="meta-llama/Llama-3.1-8B-Instruct",
    architecture="LlamaForCausalLM",
    draft_kind="eagle3",
    default_algorithm="EAGLE3",
    context_len=131072,
    tp=1,
    gpu_name="NVIDIA H100 80GB HBM3",
    gpu_mem_gb=79.19,
    weights_gb=14.99,
    draft_weights_gb=0.81,
    shards=4,
    eos_token_id=128009,
    model_type="llama",
    default_mem_fraction=0.835,
    kv_bytes_per_token=131072,
    draft_kv_fraction=0.031,
    overhead_gb=3.1,
    state_tokens=0.0,
    state_spec_tokens=0.0,
    slot_tokens=2.0,
    workspace_tokens=2.2,
    default_graph_bs=256,
    nospec_max_running=4096,
    t_fixed=5.2,
    t_experts=0.0,
    expert_share=0.0,
    t_token=0.016,
    t_kv=0.0021,
    t_draft=0.38,
    t_draft_token=0.0028,
    t_spec=0.55,
    t_tree=0.4,
    t_batch=0.004,
    t_prefill_fixed=0.6,
    t_prefill_token=0.0105,
    greedy=Acceptance(top=1.0, horizon=6.183, spread=3.253, width_miss=0.7),
    natural=Acceptance(top=0.9927, horizon=3.526, spread=3.168, width_miss=0.74),
)

DEEPSEEK_V3 = Profile(
    name="deepseek-v3-mtp-8xh200",
    summary=(
        "DeepSeek-V3 (671B MoE, MLA) with its one-step MTP head on 8x H200 NVLink: "
        "compute-heavy verify, compact KV, acceptance that fades beyond depth 2"
    ),
    model_path="deepseek-ai/DeepSeek-V3",
    architecture="DeepseekV3ForCausalLM",
    draft_kind="mtp",
    default_algorithm="EAGLE",
    context_len=163840,
    tp=8,
    gpu_name="NVIDIA H200",
    gpu_mem_gb=139.81,
    weights_gb=83.4,
    draft_weights_gb=1.9,
    shards=163,
    eos_token_id=1,
    model_type="deepseek_v3",
    default_mem_fraction=0.86,
    kv_bytes_per_token=70272,
    draft_kv_fraction=0.016,
    overhead_gb=6.2,
    state_tokens=0.0,
    state_spec_tokens=0.0,
    slot_tokens=2.0,
    workspace_tokens=9.0,
    default_graph_bs=128,
    nospec_max_running=1024,
    t_fixed=9.8,
    t_experts=15.5,
    expert_share=8 / 256,
    t_token=0.105,
    t_kv=0.0016,
    t_draft=1.45,
    t_draft_token=0.02,
    t_spec=1.3,
    t_tree=0.6,
    t_batch=0.01,
    t_prefill_fixed=2.0,
    t_prefill_token=0.085,
    greedy=Acceptance(top=1.0, horizon=2.555, spread=1.217, width_miss=0.6),
    natural=Acceptance(top=1.0, horizon=1.652, spread=1.099, width_miss=0.64),
)

PROFILES: dict[str, Profile] = {p.name: p for p in (QWEN35_122B, LLAMA31_8B, DEEPSEEK_V3)}
DEFAULT_PROFILE = QWEN35_122B.name
ALIASES: dict[str, str] = {
    "default": QWEN35_122B.name,
    "qwen": QWEN35_122B.name,
    "llama": LLAMA31_8B.name,
    "small": LLAMA31_8B.name,
    "deepseek": DEEPSEEK_V3.name,
    "large": DEEPSEEK_V3.name,
}


def get_profile(name: str) -> Profile:
    """A profile by name or alias; KeyError names the known ones."""
    key = ALIASES.get(name, name)
    if key not in PROFILES:
        known = ", ".join([*PROFILES, *ALIASES])
        raise KeyError(f"unknown profile {name!r} (known: {known})")
    return PROFILES[key]
