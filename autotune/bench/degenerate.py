"""Flag degenerate output: text that loops.

A drafting head predicts a repeating loop perfectly, so degenerate output
inflates acceptance and throughput; a level with many such requests measures
the loop, not the model. Repetition is the share of n-grams that already
occurred earlier in the same text.
"""

from __future__ import annotations

WORD_N = 4
CHAR_N = 12
THRESHOLD = 0.5
"""Repeated share above which a text counts as degenerate. Natural prose scores
below 0.05 and ordinary code below 0.3; a text stuck in a loop scores near 1."""
MIN_GRAMS = 20
"""Shorter texts are too short to judge and never count as degenerate."""


def repetition(text: str) -> float:
    """Share of the text's n-grams that repeat an earlier one (0 = none, ->1 = a loop).

    Word 4-grams for text with spaces; character 12-grams for text without
    (Chinese, Japanese, minified code), where a "word" would be a whole line.
    """
    words = text.split()
    if len(words) >= MIN_GRAMS + WORD_N - 1 and len(text) / len(words) < 20:
        grams = [tuple(words[i : i + WORD_N]) for i in range(len(words) - WORD_N + 1)]
    else:
        squeezed = "".join(words)
        if len(squeezed) < MIN_GRAMS + CHAR_N - 1:
            return 0.0
        grams = [squeezed[i : i + CHAR_N] for i in range(len(squeezed) - CHAR_N + 1)]
    if len(grams) < MIN_GRAMS:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def is_degenerate(text: str, threshold: float = THRESHOLD) -> bool:
    return repetition(text) > threshold
