"""autotune's beliefs about SGLang, checked against the real wheels (never imported).

Each test names a belief the adapter or the simulator acts on; a failure says which wheel
contradicts it and where (`sglang/srt/...py:LINE`). Messages are checked by rendering the
wheel's own f-string or log template and handing it to the adapter's classifier or parser,
so a reworded message fails here before it mislabels a trial.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from autotune.engines import sglang_facts as facts
from autotune.engines.sglang import SGLangEngine, mamba_cap, parse_capacity
from autotune.sim import adaptive as sim_adaptive
from autotune.sim import args as sim_args
from autotune.sim import metrics as sim_metrics
from autotune.sim import model as sim_model
from autotune.sim.app import SimServer
from autotune.sim.profiles import QWEN35_122B
from autotune.space import load_space
from tests.conformance.wheel import Wheel

ENGINE = SGLangEngine()
SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
V = facts.version_key


def at_least(wheel: Wheel, version: str) -> bool:
    return V(wheel.version) >= V(version)


def render(template: str, value: str = "7") -> str:
    return template.replace("{}", value)


def traceback(member: str, function: str, exception: str, message: str) -> str:
    """The tail of a traceback as SGLang's launcher prints it for an exception in `member`."""
    return (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py", line 30, '
        "in <module>\n"
        "    server_args = prepare_server_args(sys.argv[1:])\n"
        f'  File "/usr/local/lib/python3.12/dist-packages/{member}", line 100, in {function}\n'
        f"    raise {exception}(\n"
        f"{exception}: {message}\n"
    )


def _function_of(wheel: Wheel, member: str, node: ast.AST) -> str:
    for fn in ast.walk(wheel.tree(member)):
        inside = (
            fn.lineno <= node.lineno <= (getattr(fn, "end_lineno", 0) or 0)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            else False
        )
        if inside:
            return fn.name
    return "<module>"


# ------------------------------------------------------------------------ the release
def test_the_wheel_is_the_release_it_claims(wheel: Wheel) -> None:
    # sglang/version.py holds it (0.5.6) or imports it from setuptools-scm's _version.py.
    found = wheel.find(wheel.version, "sglang/version.py") or wheel.find(
        wheel.version, "sglang/_version.py"
    )
    assert found is not None, f"{wheel}: sglang/version.py does not say {wheel.version}"
    assert facts.in_range(wheel.version), f"{wheel} is checked but outside the supported range"


def test_the_supported_range_reads_versions_as_releases() -> None:
    assert facts.in_range("0.5.23") and facts.in_range("0.5.6.post2")
    assert facts.in_range("0.5.5") is False and facts.in_range("0.6.0") is False
    assert facts.in_range("main") is None


# ------------------------------------------------------------------------ the parser
def _prog(wheel: Wheel) -> str:
    found = wheel.find("sglang serve", "sglang/srt/server_args.py")
    if at_least(wheel, facts.PARSER_PROG.since):
        assert found is not None, (
            f"{wheel}: server_args.py has no ArgumentParser(prog='sglang serve')"
        )
        return "sglang serve"
    assert found is None, (
        f"{wheel}: prog 'sglang serve' is older than {facts.PARSER_PROG.since} ({found.where})"
    )
    return "launch_server.py"  # argparse's default: the script's name


def test_an_unknown_flag_stops_the_study_naming_it(wheel: Wheel) -> None:
    source = wheel.source("sglang/srt/server_args.py")
    # parse_args (not parse_known_args): an unknown flag is argparse's usage error, exit 2.
    assert "parser.parse_args(" in source, f"{wheel}: server_args.py no longer calls parse_args"
    line = f"{_prog(wheel)}: error: unrecognized arguments: --speculative-num-stepz 3"
    failure = ENGINE.classify_failure(f"usage: {_prog(wheel)} [-h] ...\n{line}\n", 2)
    assert failure.kind == "unsupported_flag", (wheel, failure)
    assert failure.flag == "--speculative-num-stepz"


def test_a_bad_flag_value_is_refused(wheel: Wheel) -> None:
    line = f"{_prog(wheel)}: error: argument --speculative-num-steps: invalid int value: 'x'"
    assert ENGINE.classify_failure(line + "\n", 2).kind == "refused"


# ------------------------------------------------------------------------ flags
_SIM_TYPES = {
    sim_args._int: "int",
    sim_args._positive: "int",
    sim_args._float: "float",
    sim_args._fraction: "float",
    sim_args._algorithm: "str",
    sim_args._match_type: "str",
}


def test_every_flag_the_simulator_models_is_the_servers(newest: Wheel) -> None:
    """Name and type of every SGLang flag the simulator parses, in the release it speaks."""
    flags = newest.flags
    for flag, (_, convert) in sim_args._VALUE_FLAGS.items():
        if flag == "--model":  # an alias of --model-path
            continue
        assert flag in flags, f"{newest}: the simulator models {flag}, the server has none"
        want = _SIM_TYPES.get(convert, "str")
        assert flags[flag].type == want, (
            f"{newest}: {flag} is {flags[flag].type} ({flags[flag].where}); the simulator "
            f"parses it as {want}"
        )
    for flag in sim_args._BOOL_FLAGS:
        assert flags[flag].type == "bool", f"{newest}: {flag} is {flags[flag].type}"


_TUNED = {
    "--speculative-algorithm": "str",
    "--speculative-num-steps": "int",
    "--speculative-eagle-topk": "int",
    "--speculative-num-draft-tokens": "int",
    "--max-running-requests": "int",
    "--mem-fraction-static": "float",
    "--enable-metrics": "bool",
}


def test_the_flags_autotune_tunes_and_reads(wheel: Wheel) -> None:
    """In every supported release: the knobs' names, types and "not given" defaults, on which
    the adapter's resolved-value check and the auto-default rules rest."""
    for flag, kind in _TUNED.items():
        found = wheel.flags.get(flag)
        assert found is not None, f"{wheel}: no {flag}"
        assert found.type == kind, f"{wheel}: {flag} is {found.type} ({found.where})"
        want = False if kind == "bool" else None
        assert found.default == want, (
            f"{wheel}: {flag} defaults to {found.default!r} ({found.where})"
        )


def test_every_flag_a_search_space_sets_exists(newest: Wheel) -> None:
    for path in sorted(SPACES.glob("sglang-*.yaml")):
        space = load_space(path)
        for flag in space.launch_flags():
            assert flag in newest.flags, f"{path.name} sets {flag}; {newest} has no such flag"


def test_the_algorithms_the_simulator_accepts_are_sglangs(wheel: Wheel) -> None:
    flag = wheel.flags["--speculative-algorithm"]
    if flag.choices is not None:
        assert set(facts.ALGORITHMS) <= set(flag.choices), (wheel, flag.choices, flag.where)
    else:
        # Enum members of SpeculativeAlgorithm, and NEXTN among its reserved aliases.
        member = "sglang/srt/speculative/spec_info.py"
        tree = wheel.tree(member)
        names = {s.text for s in wheel.strings(member)}
        if wheel.has("sglang/srt/speculative/spec_registry.py"):  # _RESERVED_ALIASES
            names |= {s.text for s in wheel.strings("sglang/srt/speculative/spec_registry.py")}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == "SpeculativeAlgorithm":
                names |= {t.id for st in node.body if isinstance(st, ast.Assign)
                          for t in st.targets if isinstance(t, ast.Name)}  # fmt: skip
        missing = set(facts.ALGORITHMS) - names
        assert not missing, f"{wheel}: spec_info.py does not name {missing}"
    assert tuple(sim_model.ALGORITHMS) == facts.ALGORITHMS


def test_an_unknown_algorithm_is_refused(wheel: Wheel) -> None:
    flag = wheel.flags["--speculative-algorithm"]
    if flag.choices is not None:
        # argparse refuses it with the choices listed.
        line = f"{_prog(wheel)}: error: argument --speculative-algorithm: invalid choice: 'X'"
        assert ENGINE.classify_failure(line, 2).kind == "refused"
        return
    member = facts.UNKNOWN_ALGORITHM.file
    found = wheel.find(facts.UNKNOWN_ALGORITHM.text.split("{}")[0], member)
    assert found is not None, f"{wheel}: {member} no longer says {facts.UNKNOWN_ALGORITHM.text!r}"
    log = traceback(member, "from_string", "ValueError", render(facts.UNKNOWN_ALGORITHM.text, "X"))
    failure = ENGINE.classify_failure(log, 1)
    assert failure.kind == "refused", (wheel, found.where, failure)


# ------------------------------------------------------------------------ rules
def _speculative_rules(wheel: Wheel) -> str:
    if wheel.has("sglang/srt/arg_groups/speculative_hook.py"):
        return "sglang/srt/arg_groups/speculative_hook.py"
    return "sglang/srt/server_args.py"


@pytest.mark.parametrize("belief", ["DRAFT_ADJUSTED_WARNING", "MAX_RUNNING_RESET_WARNING"])
def test_the_rules_the_adapter_applies_print_what_sglang_prints(wheel: Wheel, belief: str) -> None:
    fact: facts.Since = getattr(facts, belief)
    member = fact.file if at_least(wheel, fact.since) else _speculative_rules(wheel)
    found = wheel.find(fact.text, member)
    assert found is not None, f"{wheel}: {member} does not print {fact.text!r}"
    assert getattr(sim_model, belief) == fact.text, f"the simulator prints another {belief}"


def test_topk_one_makes_draft_tokens_steps_plus_one(wheel: Wheel) -> None:
    source = wheel.source(_speculative_rules(wheel))
    rule = re.search(
        r"speculative_num_draft_tokens\s*=\s*(?:\w+\.)*speculative_num_steps\s*\+\s*1", source
    )
    assert rule, f"{wheel}: {_speculative_rules(wheel)} no longer sets draft tokens to steps + 1"
    asked = {"speculative_num_steps": 3, "speculative_eagle_topk": 1,
             "speculative_num_draft_tokens": 8}  # fmt: skip
    assert ENGINE.runs(asked)["speculative_num_draft_tokens"] == 4


def test_every_speculative_value_error_is_a_refusal(wheel: Wheel) -> None:
    """Each `raise ValueError(...)` of the speculative argument rules, printed as SGLang
    prints it, is `refused`: the config's fault, recorded infeasible, the study goes on."""
    member = _speculative_rules(wheel)
    raised = [r for r in wheel.raises(member) if r[0] in ("ValueError", "AssertionError")]
    assert raised, f"{wheel}: no ValueError in {member}"
    for kind, message, node in raised:
        if member.endswith("server_args.py") and "speculative" not in message.lower():
            continue
        log = traceback(member, _function_of(wheel, member, node), kind, render(message))
        failure = ENGINE.classify_failure(log, 1)
        assert failure.kind == "refused", f"{wheel}: {member}:{node.lineno}: {failure}"


# ------------------------------------------------------------------------ out of memory
_MEMORY = re.compile(
    r"not enough (?:gpu )?memory|out of memory|too small to serve|leaves? no (?:room|gpu memory)",
    re.IGNORECASE,
)
_MEMORY_FILES = (
    "sglang/srt/model_executor/pool_configurator.py",
    "sglang/srt/mem_cache/kv_cache_configurator.py",
    "sglang/srt/model_executor/model_runner.py",
    "sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
)


@pytest.mark.parametrize("index", range(len(facts.OOM_MESSAGES)))
def test_each_known_out_of_memory_message_is_in_the_wheel(wheel: Wheel, index: int) -> None:
    fact = facts.OOM_MESSAGES[index]
    if not at_least(wheel, fact.since):
        return
    assert wheel.find(fact.text.split("{}")[0], fact.file) is not None, (
        f"{wheel}: {fact.file} no longer says {fact.text[:60]!r}"
    )
    log = traceback(fact.file, "init", "RuntimeError", render(fact.text))
    assert ENGINE.classify_failure(log, 1).kind == "out_of_memory"


def test_every_out_of_memory_raise_in_the_wheel_is_out_of_memory(wheel: Wheel) -> None:
    """Not a list to keep up to date: every raise in the memory code whose message speaks
    of memory running out must classify as out_of_memory."""
    seen = 0
    for member in _MEMORY_FILES:
        if not wheel.has(member):
            continue
        for kind, message, node in wheel.raises(member):
            if not _MEMORY.search(message):
                continue
            seen += 1
            log = traceback(member, _function_of(wheel, member, node), kind, render(message))
            failure = ENGINE.classify_failure(log, 1)
            assert failure.kind == "out_of_memory", f"{wheel}: {member}:{node.lineno}: {failure}"
    assert seen, f"{wheel}: no out-of-memory raise found in {_MEMORY_FILES}"


def test_the_mamba_cap_is_read_from_the_log(wheel: Wheel) -> None:
    fact = facts.MAMBA_CAP_WARNING
    found = wheel.find(fact.text.split("{}")[0], fact.file)
    if not at_least(wheel, fact.since):
        assert found is None, f"{wheel}: the mamba cap predates {fact.since} ({found})"
        return
    assert found is not None, f"{wheel}: {fact.file} no longer warns {fact.text[:50]!r}"
    assert found.text.startswith(fact.text.split(" To raise")[0]), (found.where, found.text)
    line = f"[2026-12-02 10:00:00 TP0] {render(fact.text, '9')}"
    assert mamba_cap(line) == 9


# ------------------------------------------------------------------------ log lines
def test_the_ready_line(wheel: Wheel) -> None:
    found = wheel.find(facts.READY_LINE.text, facts.READY_LINE.file)
    assert found is not None, f"{wheel}: {facts.READY_LINE.file} has no ready line"
    assert ENGINE.ready_in_log(f"[2026-12-02 10:00:00] {found.text}")


def _render_fields(node: ast.JoinedStr, values: dict[str, str]) -> str:
    out = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            out.append(str(part.value))
            continue
        assert isinstance(part, ast.FormattedValue)
        expr = part.value
        if isinstance(expr, ast.IfExp) and isinstance(expr.orelse, ast.Constant):
            out.append(str(expr.orelse.value))  # the GPU branch of `cpu if ... else gpu`
            continue
        name = ast.unparse(expr).rsplit(".", 1)[-1].strip("()")
        out.append(values.get(name, "7"))
    return "".join(out)


def test_the_capacity_line_is_parsed(wheel: Wheel) -> None:
    member = "sglang/srt/managers/scheduler.py"
    lines = [
        n
        for n in ast.walk(wheel.tree(member))
        if isinstance(n, ast.JoinedStr)
        and any(
            isinstance(v, ast.Constant) and "max_total_num_tokens=" in str(v.value)
            for v in n.values
        )
        and any(
            isinstance(v, ast.Constant) and "max_prefill_tokens=" in str(v.value) for v in n.values
        )
    ]
    assert lines, f"{wheel}: {member} prints no capacity line"
    values = {"max_total_num_tokens": "455357", "max_running_requests": "26",
              "context_len": "262144", "max_prefill_tokens": "16384",
              "chunked_prefill_size": "8192"}  # fmt: skip
    text = _render_fields(lines[0], values)
    capacity = parse_capacity(f"[2026-12-02 10:00:00 TP0] {text}")
    assert capacity is not None, f"{wheel}: {member}:{lines[0].lineno}: {text!r} not read"
    assert (capacity.max_total_num_tokens, capacity.max_running_requests) == (455357, 26)
    assert capacity.context_len == 262144


def test_the_decode_line_gives_the_accept_length(wheel: Wheel) -> None:
    members = wheel.files("sglang/srt/managers/")
    heads = [
        s
        for m in members
        for s in wheel.strings(m)
        if s.text.startswith("Decode batch{}, #running-req: {}")
    ]
    accepts = [s for m in members for s in wheel.strings(m) if s.text.startswith("accept len: {}")]
    assert heads, f"{wheel}: no decode line in srt/managers/"
    assert accepts, f"{wheel}: the decode line has no 'accept len: ' part"
    for head in ("", " [12]"):
        line = heads[0].text.replace("{}", head, 1).replace("{}", "16")
        line += "token usage: 0.05, " + accepts[0].text.replace("{}", "3.41", 1).replace(
            "{}", "0.60"
        )
        assert ENGINE.accept_length_from_log(f"[2026-12-02 10:00:00 TP0] {line}") == 3.41, line


def test_the_per_request_histogram_of_accepted_drafts(wheel: Wheel) -> None:
    """The performance model's acceptance per position: the key SGLang writes, and that it
    counts verify steps by accepted drafts (the index), as autotune reads it."""
    fact = facts.DRAFTS_HISTOGRAM
    found = wheel.find(fact.text, fact.file)
    if not at_least(wheel, fact.since):
        assert found is None, f"{wheel}: {fact.file} has {fact.text!r} before {fact.since}"
        return
    assert found is not None, f"{wheel}: {fact.file} no longer writes {fact.text!r}"
    counting = [
        m
        for m in wheel.files("sglang/srt/managers/")
        if re.search(r"_histogram\[num_\w+\] \+= 1", wheel.source(m))
    ]
    assert counting, f"{wheel}: nothing counts verify steps by accepted drafts"


# ------------------------------------------------------------------------ HTTP
_ENDPOINTS = {
    "/health": facts.OLDEST,
    "/health_generate": facts.OLDEST,
    "/server_info": facts.OLDEST,
    "/get_server_info": facts.OLDEST,
    "/metrics": facts.OLDEST,
    "/flush_cache": facts.OLDEST,
    "/generate": facts.OLDEST,
    "/get_model_info": facts.OLDEST,
    "/model_info": facts.OLDEST,
    "/ready": "0.5.20",
}


def test_the_endpoints_autotune_and_the_simulator_use(wheel: Wheel) -> None:
    routes = wheel.routes
    for path, since in _ENDPOINTS.items():
        if at_least(wheel, since):
            assert path in routes, f"{wheel}: http_server.py has no {path}"
        else:
            assert path not in routes, f"{wheel}: {path} predates {since} ({routes[path]})"
    served = {p for _, p in SimServer.ROUTES if not p.startswith(("/sim/", "/v1/"))}
    unknown = served - set(routes)
    assert not unknown or not at_least(wheel, facts.SIMULATED), f"the simulator serves {unknown}"


def test_flush_cache_is_posted_and_waits_for_idle_where_it_can(wheel: Wheel) -> None:
    # Before every level autotune POSTs /flush_cache?timeout=...: a 0.5.6 ignores the query.
    for fact in (facts.FLUSH_CACHE_ROUTE, facts.FLUSH_CACHE_WAIT):
        present = fact.text in wheel.source(fact.file)
        assert present == at_least(wheel, fact.since), (wheel, fact.text, fact.since)
    # The flush also empties NGRAM's store of earlier requests' tokens (its draft worker's
    # cache pool), which is what a repeated prompt would otherwise be drafted from.
    worker = wheel.source("sglang/srt/speculative/ngram_worker.py")
    clear = worker[worker.index("def clear_cache_pool") :].split("\n    def ")[0]
    assert ".reset()" in clear, f"{wheel}: NGRAM's clear_cache_pool no longer resets its store"


def test_get_server_info_is_deprecated_and_server_info_comes_first(wheel: Wheel) -> None:
    fact = facts.DEPRECATED_SERVER_INFO_WARNING
    found = wheel.find(fact.text, fact.file)
    fn = wheel.function(fact.file, "get_server_info")
    assert found is not None and fn is not None, f"{wheel}: /get_server_info no longer warns"
    line = int(found.where.rsplit(":", 1)[1])
    assert fn.lineno <= line <= (fn.end_lineno or fn.lineno), f"{wheel}: {found.where}"
    assert "/server_info" in wheel.routes


def test_server_info_reports_the_launch_command(wheel: Wheel) -> None:
    sources = "\n".join(
        wheel.source(m)
        for m in ("sglang/srt/entrypoints/http_server.py", "sglang/srt/utils/common.py")
        if wheel.has(m)
    )
    has = '"launch_command"' in sources
    assert has == at_least(wheel, "0.5.20"), f"{wheel}: launch_command in /server_info: {has}"


def test_server_info_fields_the_adapter_reads(wheel: Wheel) -> None:
    managers = "\n".join(wheel.source(m) for m in wheel.files("sglang/srt/managers/"))
    # Before 0.5.8 there is no effective cap: the adapter falls back to the configured
    # max_running_requests and the capacity log line (engines/sglang.py, _max_running_requests).
    since = {"effective_max_running_requests_per_dp": "0.5.8", "memory_usage": facts.OLDEST,
             "token_capacity": "0.5.16"}  # fmt: skip
    for key, first in since.items():
        if not at_least(wheel, first):
            continue
        assert f'"{key}"' in managers or f"'{key}'" in managers or f"{key}=" in managers, (
            f"{wheel}: no {key} in srt/managers/"
        )


# ------------------------------------------------------------------------ metrics
def test_the_metrics_autotune_reads_exist(wheel: Wheel) -> None:
    metrics = wheel.metrics
    for name, since in facts.METRICS.items():
        if at_least(wheel, since):
            assert name in metrics, f"{wheel}: no {name} on /metrics"
    assert "sglang:max_running_requests" not in metrics


def test_the_simulator_exports_only_sglangs_metrics(newest: Wheel) -> None:
    exported = set(sim_metrics.names())
    assert exported, "the simulator exports no metric"
    unknown = exported - set(newest.metrics)
    assert not unknown, f"the simulator exports {unknown}, {newest} has no such metric"


# ------------------------------------------------------------------------ adaptive
def test_the_default_adaptive_config(newest: Wheel) -> None:
    member = "sglang/srt/speculative/adaptive_spec_params.py"
    for node in ast.walk(newest.tree(member)):
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(t, ast.Name) and t.id == "DEFAULT_ADAPTIVE_CONFIG" for t in targets):
            default = ast.literal_eval(node.value)
            break
    else:
        pytest.fail(f"{newest}: {member} has no DEFAULT_ADAPTIVE_CONFIG")
    steps = {int(k): tuple(v["candidate_steps"]) for k, v in default.items() if k.isdigit()}
    assert steps == facts.ADAPTIVE_CANDIDATE_STEPS, f"{member}:{node.lineno}: {steps}"
    assert default == sim_adaptive.DEFAULT_CONFIG, (
        f"the simulator's default differs: {member}:{node.lineno}"
    )


def test_the_memory_per_decode_step(wheel: Wheel) -> None:
    member = "sglang/srt/mem_cache/allocation_sizing.py"
    if not at_least(wheel, "0.5.16"):
        assert not wheel.has(member)
        return
    rule = "max(spec_steps * spec_topk, spec_tokens)"
    assert f"return {rule}" in wheel.source(member), (
        f"{wheel}: {member} sizes a decode step differently"
    )
    # The simulator's pools and every search space's memory_per_request follow the rule.
    for steps, topk, draft in ((1, 1, 2), (3, 1, 4), (2, 4, 9), (4, 2, 5), (8, 8, 64), (2, 8, 3)):
        env = {"spec_steps": steps, "spec_topk": topk, "spec_tokens": draft}
        want = eval(rule, {"max": max}, env)
        assert facts.decode_alloc_tokens(steps, topk, draft) == want
        assert sim_model.alloc_len(sim_model.Spec(steps, topk, draft)) == want
        config = {"speculative_num_steps": steps, "speculative_eagle_topk": topk,
                  "speculative_num_draft_tokens": draft}  # fmt: skip
        chains = ("sglang-mtp.yaml", "sglang-adaptive.yaml") if topk == 1 else ()
        for name in ("sglang-eagle.yaml", *chains):
            got = load_space(SPACES / name).memory_tokens(config)
            assert got == want, f"{name}: memory_per_request {got} for {config}, SGLang {want}"
    ngram = load_space(SPACES / "sglang-ngram.yaml")
    for draft, breadth in ((4, 4), (12, 10), (24, 6)):
        # NGRAM: topk := breadth, steps := draft // breadth, so steps * topk <= draft.
        env = {"spec_steps": draft // breadth, "spec_topk": breadth, "spec_tokens": draft}
        got = ngram.memory_tokens({"speculative_num_draft_tokens": draft,
                                   "speculative_ngram_max_bfs_breadth": breadth,
                                   "speculative_ngram_max_trie_depth": 18})  # fmt: skip
        assert got == eval(rule, {"max": max}, env), f"sglang-ngram.yaml: {got}"


def test_spec_v2_overlaps_unless_disabled(wheel: Wheel) -> None:
    flag = wheel.flags["--disable-overlap-schedule"]
    assert flag.type == "bool" and flag.default is False, flag
    if not at_least(wheel, "0.5.14"):
        return  # spec v1 by default; the simulator speaks 0.5.23
    member = "sglang/srt/arg_groups/speculative_hook.py"
    found = wheel.find(sim_model.NON_OVERLAP_WARNING, member)
    assert found is not None, f"{wheel}: {member} no longer warns {sim_model.NON_OVERLAP_WARNING!r}"
    chain = sim_model.Launch("EAGLE", 3, 1, 4)
    resolved = sim_model.resolve(QWEN35_122B, chain)
    assert isinstance(resolved, sim_model.Resolved) and resolved.overlap


def test_the_mamba_state_slots_per_request(newest: Wheel) -> None:
    member = "sglang/srt/mem_cache/kv_cache_configurator.py"
    source = newest.source(member)
    base = re.search(r"^MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = (\d+)", source, re.M)
    assert base, f"{newest}: {member} has no MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO"
    tracking = newest.source("sglang/srt/mem_cache/allocation_sizing.py")
    assert "return 2 if overlap else 1" in tracking, f"{newest}: tracking slots changed"
    # extra_buffer (chosen with the overlap scheduler) adds 2; without it, no_buffer: none.
    slots = int(base[1])
    simulated = (sim_model.MAMBA_SLOTS_OVERLAP, sim_model.MAMBA_SLOTS)
    assert simulated == (slots + 2, slots), f"{newest}: {member}: {slots} slots per request"


# ------------------------------------------------------------------------ known differences
def test_the_simulators_known_differences_still_differ(newest: Wheel) -> None:
    """What the simulator does not yet speak of the newest release (docs/rehearsal.md). When
    one is fixed, this test fails until it leaves the list."""
    member = "sglang/srt/mem_cache/kv_cache_configurator.py"
    # The mamba cache as a fixed share of the memory left (the simulator: its state model).
    share = re.compile(
        r"\* get_schedule\(\)\.mamba_full_memory_ratio\s*"
        r"/ \(1 \+ get_schedule\(\)\.mamba_full_memory_ratio\)"
    )
    assert share.search(newest.source(member)), (
        f"{newest}: {member} sizes the mamba budget otherwise"
    )
    assert len(facts.KNOWN_SIMULATOR_DIFFERENCES) == 1


# ------------------------------------------------------------------------ CUDA graphs
def _capture_branches(wheel: Wheel) -> tuple[str, str]:
    """(non-speculative, speculative) capture-size expressions of 0.5.23's
    generate_decode_cuda_graph_batch_sizes, as source text."""
    member = "sglang/srt/arg_groups/cuda_graph_hook.py"
    fn = wheel.function(member, "generate_decode_cuda_graph_batch_sizes")
    assert fn is not None, f"{wheel}: {member} has no generate_decode_cuda_graph_batch_sizes"
    values = [
        ast.unparse(n.value)
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "capture_bs" for t in n.targets)
        and "range(1, max_bs + 1)" not in ast.unparse(n.value)
        and "for bs in" not in ast.unparse(n.value)
    ]
    assert len(values) == 2, f"{wheel}: {member}:{fn.lineno}: {values}"
    return values[0], values[1]


@pytest.mark.parametrize("max_bs", [1, 8, 13, 48, 160, 256, 300, 512])
def test_the_capture_sizes_the_simulator_logs(newest: Wheel, max_bs: int) -> None:
    for speculative, expression in zip((False, True), _capture_branches(newest), strict=True):
        sizes = [b for b in eval(expression, {"range": range, "list": list, "max_bs": max_bs})
                 if b <= max_bs]  # fmt: skip
        if max_bs not in sizes:
            sizes.append(max_bs)
        assert facts.decode_capture_sizes(max_bs, speculative=speculative) == tuple(sizes)


def test_adaptive_routing_pads_only_to_explicit_capture_sizes(newest: Wheel) -> None:
    """The controller pads a batch to the CUDA-graph sizes only when --cuda-graph-bs-decode
    is given (eagle_worker_v2.py passes get_exec().graph.cuda_graph_bs_decode, None by
    default): the simulator and export-adaptive route by the raw batch size."""
    source = newest.source("sglang/srt/speculative/eagle_worker_v2.py")
    assert "else get_exec().graph.cuda_graph_bs_decode" in source
    assert newest.flags["--cuda-graph-bs-decode"].default is None
    cfg = sim_adaptive.parse(None)
    assert [cfg.entry_for(b, sim_adaptive.routing_sizes()).min_batch for b in (5, 7, 9, 31)] == [
        1, 1, 8, 8,
    ]  # fmt: skip


def test_tier_switches_are_read_from_the_log(wheel: Wheel) -> None:
    fact = facts.TIER_SWITCH
    head = fact.text.split("{}")[0]
    found = (
        [s for s in wheel.strings(fact.file) if s.text.startswith(head)]
        if wheel.has(fact.file)
        else []
    )
    if not at_least(wheel, fact.since):
        assert not found, f"{wheel}: {fact.file} logs tier switches before {fact.since}"
        return
    assert found, f"{wheel}: {fact.file} no longer logs {head!r}"
    line = found[0].text.replace("{}", "5", 1).replace("{}", "3", 1)
    line = line.replace("{}", "6", 1).replace("{}", "4", 1)
    assert line == fact.text.format(5, 3, 6, 4), (found[0].where, line)
    switches = ENGINE.tier_switches(f"[2026-12-02 10:00:07 TP0] {line}\nother line\n")
    assert [(b, a) for _, b, a in switches] == [(5, 3)]
    assert switches[0][0] is not None


# ------------------------------------------------------------------ the host's failures
def test_no_accelerator_is_the_hosts_failure(wheel: Wheel) -> None:
    # SGLang's own words when no GPU is visible (srt/utils/common.py, `get_device`): every
    # trial would fail so, so the study stops instead of recording them infeasible.
    found = wheel.find("No accelerator (", "sglang/srt/utils/common.py")
    assert found is not None, f"{wheel}: sglang/srt/utils/common.py no longer says 'No accelerator'"
    log = traceback("sglang/srt/utils/common.py", "get_device", "RuntimeError", found.text)
    failure = ENGINE.classify_failure(log, exit_code=1)
    assert failure.kind == "no_gpu", (found.where, failure)
