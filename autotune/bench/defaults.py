"""What a level measures unless told otherwise: a study's `benchmark:` defaults and
`autotune bench`'s, one set, so that a benchmark by hand measures what a trial measures."""

from __future__ import annotations

CONCURRENCY = (1, 16, 64)
WORKLOAD = "natural"
MAX_TOKENS = 256
MIN_DURATION = 5.0
MAX_DURATION = 30.0
CI_WIDTH = 0.02
ENDPOINT = "chat"
