"""Tests of the experiments themselves (their cells, their harness, their scripts), run by
`make test` beside the top-level suite (pyproject's `testpaths`)."""
