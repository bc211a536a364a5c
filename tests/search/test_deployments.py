"""A config's worth over its deployments: the spread between them, the interval, the gain,
and the declared best. Figures from the study issue 48 reported (the demo on 2026-12-06)."""

from __future__ import annotations

import math

import pytest

from autotune.search import deployments as dep


def test_the_spread_is_pooled_over_configs_deployed_more_than_once_with_the_prior() -> None:
    groups = [[292.4, 281.1, 276.1], [273.4, 271.8], [250.0]]
    sp = dep.pooled(groups)
    logs = [[math.log(v) for v in g] for g in groups[:2]]
    ss = sum(sum((x - sum(g) / len(g)) ** 2 for x in g) for g in logs)
    assert sp.dof == 3 + dep.PRIOR_DOF and sp.configs == 2
    assert sp.sd == pytest.approx(math.sqrt((ss + dep.PRIOR_DOF * dep.PRIOR_SD**2) / 5))
    # Nothing deployed twice: the prior alone, and said so.
    alone = dep.pooled([[250.0], [260.0]])
    assert (alone.sd, alone.dof, alone.configs) == (dep.PRIOR_SD, dep.PRIOR_DOF, 0)
    assert "assumed" in alone.text()


def test_one_deployment_gives_a_wide_interval_three_a_narrower_one() -> None:
    sp = dep.pooled([[292.4, 281.1, 276.1], [273.4, 271.8]])
    one = dep.of([292.4], sp)
    three = dep.of([292.4, 281.1, 276.1], sp)
    assert one is not None and three is not None
    assert three.value == pytest.approx((292.4 * 281.1 * 276.1) ** (1 / 3))
    assert (three.high - three.low) < (one.high - one.low)
    assert three.low < 276.1 < 292.4 < three.high  # each deployment inside its config's interval
    assert (
        three.text()
        == f"{three.value:.1f} tok/s ({three.low:.1f} … {three.high:.1f}, 3 deployments)"
    )


def test_the_declared_best_is_the_steady_config_not_the_pooled_estimate() -> None:
    """Trial 6 was declared with an estimate of 278.05 above both its own measurements
    (273.4, 271.8) while trial 1 measured 292.4, 281.1 and 276.1: on their own
    deployments, trial 1 is ahead at every one."""
    runs = {1: [292.4, 281.1, 276.1], 6: [280.0, 273.4, 271.8]}
    sp = dep.pooled(runs.values())
    assert dep.best_bound(runs, sp) == 1
    # The one with more deployments has the narrower interval: at equal means it wins.
    even = {1: [281.0, 281.0, 281.0], 9: [281.0]}
    assert dep.best_bound(even, dep.pooled(even.values())) == 1


def test_the_gain_is_a_ratio_with_the_interval_of_both_counts() -> None:
    sp = dep.pooled([[292.4, 281.1, 276.1], [240.0, 246.0]])
    best = dep.of([292.4, 281.1, 276.1], sp)
    base = dep.of([240.0, 246.0], sp)
    assert best is not None and base is not None
    g = dep.gain(best, base, sp)
    assert g.point == pytest.approx(best.value / base.value - 1)
    assert g.low < g.point < g.high
    # Wider than either config's own interval alone: both are uncertain.
    assert (g.high - g.low) > (best.high - best.low) / best.value
    assert g.text().startswith(f"{g.point:+.1%} (")


@pytest.mark.parametrize(("dof", "t"), [(1, 12.71), (2, 4.303), (11, 2.228), (31, 1.96)])
def test_student_t(dof: int, t: float) -> None:
    assert dep.t975(dof) == t
