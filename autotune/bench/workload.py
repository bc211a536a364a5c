"""Workloads: what is sent, and with which sampling settings.

- `natural` (default): the built-in prompts (chat, code, summarisation,
  reasoning; short to long) at temperature 0.7, stopping at end of sequence.
  What a tuned server will serve, so the acceptance it measures is realistic.
- `copy`: edit tasks whose answers reuse the prompt's text (add docstrings or
  comments to code, rename variables, correct or re-tense a paragraph), at
  temperature 0.7, stopping at end of sequence. Where n-gram / prompt-lookup
  speculation pays (coding assistants, editors); the answer to "which
  speculative setting is best" differs from `natural`'s.
- `greedy`: the same prompts at temperature 0 with `ignore_eos`. Every request
  runs to max_tokens and greedy text is easy to draft, so acceptance and
  throughput are an upper bound; reports label it as such.
- `random` / `random:N`: prompts of random common words, about N tokens long
  (default 512), temperature 0.7 with `ignore_eos` so every output is
  max_tokens long: a fixed-shape load, unrelated to real acceptance.
- a JSONL file (`file:PATH` or any path ending in .jsonl): one
  `{"prompt": "..."}` or `{"messages": [...]}` per line, temperature 0.7,
  stopping at end of sequence.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from autotune.bench.protocol import Prompt
from autotune.errors import ConfigError

NATURAL_TEMPERATURE = 0.7
RANDOM_INPUT_TOKENS = 512
_RANDOM_PROMPTS = 256
_ROLES = frozenset({"system", "user", "assistant"})


@dataclass(frozen=True)
class Workload:
    """What a level sends: prompts and sampling settings."""

    name: str
    """natural | greedy | random[:N] | file:<path>"""
    temperature: float
    ignore_eos: bool
    max_tokens: int
    prompts: tuple[Prompt, ...] = field(repr=False, hash=False)
    """Chat prompts as tuples of {"role", "content"} messages, or plain text."""
    description: str = ""


def load_workload(name: str, *, max_tokens: int, seed: int = 0) -> Workload:
    """Build a workload by name; prompts are shuffled by `seed`.

    Raises `ConfigError` for an unknown name or a bad prompt file.
    """
    if max_tokens < 1:
        raise ConfigError(None, "max_tokens", f"must be at least 1, got {max_tokens}")
    key = name.strip()
    if key in ("natural", ""):
        return Workload(
            "natural",
            NATURAL_TEMPERATURE,
            False,
            max_tokens,
            _shuffled(natural_prompts(), seed),
            "built-in natural prompts, temperature 0.7, stops at end of sequence",
        )
    if key == "copy":
        return Workload(
            "copy",
            NATURAL_TEMPERATURE,
            False,
            max_tokens,
            _shuffled(copy_prompts(), seed),
            "built-in edit tasks that reuse the prompt's text, temperature 0.7, "
            "stops at end of sequence",
        )
    if key == "greedy":
        return Workload(
            "greedy",
            0.0,
            True,
            max_tokens,
            _shuffled(natural_prompts(), seed),
            "built-in prompts, temperature 0, ignore_eos: upper-bound acceptance",
        )
    m = re.fullmatch(r"random(?::(\d+))?", key)
    if m:
        n = int(m.group(1)) if m.group(1) else RANDOM_INPUT_TOKENS
        if n < 1:
            raise ConfigError(None, "workload", f"random prompt length must be >= 1: {name!r}")
        return Workload(
            f"random:{n}",
            NATURAL_TEMPERATURE,
            True,
            max_tokens,
            random_prompts(n, seed=seed),
            f"random words, about {n} tokens in, {max_tokens} out (ignore_eos)",
        )
    path = key[5:] if key.startswith("file:") else key
    if (
        key.startswith("file:")
        or path.endswith((".jsonl", ".json"))
        or "/" in path
        or Path(path).is_file()
    ):
        prompts = read_prompt_file(Path(path))
        return Workload(
            f"file:{path}",
            NATURAL_TEMPERATURE,
            False,
            max_tokens,
            _shuffled(prompts, seed),
            f"{len(prompts)} prompts from {path}, temperature 0.7, stops at end of sequence",
        )
    raise ConfigError(
        None,
        "workload",
        f"unknown workload {name!r}; expected natural, copy, greedy, random[:N] or a .jsonl file",
    )


def natural_prompts() -> tuple[Prompt, ...]:
    """The built-in prompt set (package data `prompts/natural.jsonl`)."""
    ref = resources.files("autotune.bench").joinpath("prompts/natural.jsonl")
    return _parse_lines(ref.read_text(encoding="utf-8").splitlines(), "natural.jsonl")


def copy_prompts() -> tuple[Prompt, ...]:
    """The built-in edit tasks (package data `prompts/copy.jsonl`)."""
    ref = resources.files("autotune.bench").joinpath("prompts/copy.jsonl")
    return _parse_lines(ref.read_text(encoding="utf-8").splitlines(), "copy.jsonl")


def read_prompt_file(path: Path) -> tuple[Prompt, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(path), None, "workload file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), None, f"cannot read workload file: {exc}") from None
    return _parse_lines(text.splitlines(), str(path))


def _parse_lines(lines: list[str], where: str) -> tuple[Prompt, ...]:
    prompts: list[Prompt] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ConfigError(where, f"line {number}", f"not valid JSON: {exc}") from None
        prompts.append(_prompt(obj, where, number))
    if not prompts:
        raise ConfigError(where, None, "no prompts in the file")
    return tuple(prompts)


def _prompt(obj: Any, where: str, number: int) -> Prompt:
    line = f"line {number}"
    if not isinstance(obj, Mapping):
        raise ConfigError(where, line, 'expected an object with "prompt" or "messages"')
    if "prompt" in obj:
        prompt = obj["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigError(where, f"{line}: prompt", "must be a non-empty string")
        return prompt
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ConfigError(where, line, 'expected "prompt" (string) or "messages" (non-empty list)')
    out = []
    for i, msg in enumerate(messages):
        key = f"{line}: messages[{i}]"
        if not isinstance(msg, Mapping):
            raise ConfigError(where, key, 'expected {"role": ..., "content": ...}')
        role, content = msg.get("role"), msg.get("content")
        if role not in _ROLES:
            raise ConfigError(
                where, f"{key}.role", f"must be one of system, user, assistant: {role!r}"
            )
        if not isinstance(content, str):
            raise ConfigError(where, f"{key}.content", "must be a string")
        out.append({"role": role, "content": content})
    if out[-1]["role"] == "assistant":
        raise ConfigError(where, line, "the last message must not be the assistant's")
    return tuple(out)


def _shuffled(prompts: tuple[Prompt, ...], seed: int) -> tuple[Prompt, ...]:
    order = list(prompts)
    random.Random(seed).shuffle(order)
    return tuple(order)


# About 1.3 tokens per common English word in BPE vocabularies.
_TOKENS_PER_WORD = 1.3


def random_prompts(input_tokens: int, *, seed: int = 0) -> tuple[Prompt, ...]:
    """Plain-text prompts of random common words, about `input_tokens` tokens each.

    Words come from the built-in prompts, so they tokenise like real text while
    every prompt is fresh (no shared prefix for the server's cache to reuse).
    """
    vocab = sorted(
        {w for p in natural_prompts() for w in re.findall(r"[a-z]{3,12}", _text(p).lower())}
    )
    rng = random.Random(seed)
    words = max(1, round(input_tokens / _TOKENS_PER_WORD))
    return tuple(" ".join(rng.choices(vocab, k=words)) for _ in range(_RANDOM_PROMPTS))


def _text(prompt: Prompt) -> str:
    return prompt if isinstance(prompt, str) else " ".join(m["content"] for m in prompt)
