"""Workloads: built-in prompts, sampling settings, prompt files and their errors."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from autotune.bench.protocol import prompt_text
from autotune.bench.workload import load_workload, natural_prompts
from autotune.errors import ConfigError


def test_natural_prompts_are_many_varied_and_unique() -> None:
    prompts = natural_prompts()
    assert len(prompts) >= 200
    texts = [prompt_text(p) for p in prompts]
    assert len(set(texts)) == len(texts)
    lengths = sorted(len(t) for t in texts)
    assert lengths[0] < 100 and lengths[-1] > 800, "short and long prompts"
    assert any(not isinstance(p, str) and len(p) > 2 for p in prompts), "multi-turn chats"
    assert any("```" in t for t in texts), "code"


def test_built_in_file_has_categories() -> None:
    lines = Path(__file__).parents[2] / "autotune/bench/prompts/natural.jsonl"
    cats = Counter(json.loads(line)["category"] for line in lines.read_text().splitlines())
    for cat in ("chat", "code", "summarisation", "reasoning"):
        assert cats[cat] >= 30, cat


def test_natural_and_greedy_settings() -> None:
    natural = load_workload("natural", max_tokens=256)
    assert (natural.temperature, natural.ignore_eos, natural.max_tokens) == (0.7, False, 256)
    greedy = load_workload("greedy", max_tokens=256)
    assert (greedy.temperature, greedy.ignore_eos) == (0.0, True)
    assert "upper-bound" in greedy.description
    assert sorted(map(prompt_text, greedy.prompts)) == sorted(map(prompt_text, natural.prompts))
    assert hash(greedy) != hash(natural)


def test_seed_orders_prompts_reproducibly() -> None:
    a = load_workload("natural", max_tokens=8, seed=1).prompts
    assert a == load_workload("natural", max_tokens=8, seed=1).prompts
    assert a != load_workload("natural", max_tokens=8, seed=2).prompts


def test_random_prompts_have_the_asked_length() -> None:
    wl = load_workload("random:100", max_tokens=8)
    assert wl.name == "random:100" and wl.ignore_eos
    words = [len(p.split()) for p in wl.prompts if isinstance(p, str)]
    assert len(words) == len(wl.prompts) and all(70 <= w <= 85 for w in words)
    assert len(set(wl.prompts)) == len(wl.prompts)
    assert load_workload("random", max_tokens=8).name == "random:512"


def test_prompt_file(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"prompt": "hello"}\n\n'
        '{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}\n'
    )
    wl = load_workload(str(f), max_tokens=8)
    assert wl.name == f"file:{f}" and len(wl.prompts) == 2 and not wl.ignore_eos
    assert load_workload(f"file:{f}", max_tokens=8).prompts == wl.prompts


@pytest.mark.parametrize(
    ("content", "where", "problem"),
    [
        ('{"prompt": "ok"}\n{"prompt": \n', "line 2", "not valid JSON"),
        ('{"text": "x"}\n', "line 1", '"prompt"'),
        ('{"prompt": ""}\n', "line 1: prompt", "non-empty"),
        ('{"messages": [{"role": "bot", "content": "x"}]}\n', "messages[0].role", "one of"),
        ('{"messages": [{"role": "user", "content": 3}]}\n', "messages[0].content", "string"),
        ('{"messages": [{"role": "assistant", "content": "x"}]}\n', "line 1", "last message"),
        ("\n\n", "", "no prompts"),
    ],
)
def test_bad_prompt_files_name_file_line_and_problem(
    tmp_path: Path, content: str, where: str, problem: str
) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_workload(str(f), max_tokens=8)
    message = str(info.value)
    assert str(f) in message and where in message and problem in message


def test_missing_file_and_unknown_name() -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_workload("/nonexistent/prompts.jsonl", max_tokens=8)
    with pytest.raises(ConfigError, match="unknown workload 'sharegpt'"):
        load_workload("sharegpt", max_tokens=8)
    with pytest.raises(ConfigError, match="max_tokens"):
        load_workload("natural", max_tokens=0)
