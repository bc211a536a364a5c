"""Generated text: one short word per token.

Greedy decoding with ignore_eos runs into loops, which is why its acceptance
is so high; the text shows it. Sampled text is varied. About four characters
per token, so a client estimating tokens from characters lands near the truth.
"""

from __future__ import annotations

import random

_LOOPS = (
    "The answer is that the model keeps going and the text keeps going",
    "In short the best way to do this is to do it the same way again",
    "We can see that the result is the same as the result we saw before",
    "It is a good idea to check the output and then check the output",
)
_LOOP_TOKENS = tuple(tuple(" " + w for w in s.split()) for s in _LOOPS)

_WORDS = (
    "the of and to in is for on that with as it by this are be from at or an was "
    "can will not but which have has more time data each its all also one two new "
    "model server batch token GPU cache step rate load run test best path file "
    "draft tree verify accept queue graph memory throughput latency request user "
    "value error state flag unit host port speed size high low long short first "
    "last next when then than so if how what why where into over under after "
    "before while because though since both few many most some such only own same "
    "other very just well still even back way use used make made take given set "
    "work works found shows need needs keeps runs goes comes know think see look"
)
_VOCAB = tuple(" " + w for w in _WORDS.split())
_PUNCT = (".", ",", ";", ":")


class TextSource:
    """Tokens of one request's reply."""

    __slots__ = ("_i", "_loop", "_rng")

    def __init__(self, repetitive: bool, seed: int) -> None:
        self._rng = None if repetitive else random.Random(seed)
        self._loop = _LOOP_TOKENS[seed % len(_LOOP_TOKENS)]
        self._i = 0

    def take(self, n: int) -> str:
        if self._rng is None:
            loop = self._loop
            k = len(loop)
            i = self._i
            self._i = i + n
            return "".join(loop[(i + j) % k] for j in range(n))
        rng = self._rng
        parts = []
        for _ in range(n):
            w = _VOCAB[rng.randrange(len(_VOCAB))]
            if rng.random() < 0.08:
                w += _PUNCT[rng.randrange(len(_PUNCT))]
            parts.append(w)
        return "".join(parts)
