"""Degenerate (looping) output detection."""

from __future__ import annotations

from autotune.bench.degenerate import is_degenerate, repetition

PROSE = (
    "The council voted on Tuesday to turn the old railway line into a path for walking and "
    "cycling. Supporters say it will connect the northern estates with the town centre and "
    "give children a safe route to school, while some residents worry about noise and "
    "privacy. Work should begin next spring and take about eighteen months to complete."
)
CODE = """def merge(intervals):
    intervals.sort(key=lambda x: x[0])
    out = []
    for start, end in intervals:
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out
"""


def test_natural_text_and_code_are_not_degenerate() -> None:
    assert repetition(PROSE) < 0.05
    assert not is_degenerate(CODE)


def test_a_loop_is_degenerate() -> None:
    loop = "I am sorry, I cannot help with that. " * 30
    assert repetition(loop) > 0.9 and is_degenerate(loop)
    assert is_degenerate(PROSE + " " + "the the the the " * 40)


def test_text_without_spaces_uses_characters() -> None:
    assert is_degenerate("这是一个测试句子。" * 30)
    assert not is_degenerate(
        "天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏闰余成岁律吕调阳云腾致雨露结为霜"
    )


def test_short_text_is_never_degenerate() -> None:
    assert not is_degenerate("yes yes yes yes")
