"""The trial record's one schema (`autotune/search/records.py`): every key constant is in
its docstring's table, and a study written by the previous release still reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import optuna
import pytest

from autotune.search import records
from tests.helpers.e2e import REPO, autotune, status, study_dir

OLD_STUDY = REPO / "tests" / "data" / "studies" / "release-703644d.db"


def _constants(prefix: str = "") -> dict[str, str]:
    return {
        name: value
        for name, value in vars(records).items()
        if name.isupper() and isinstance(value, str) and name.startswith(prefix)
    }


def _schema_rows() -> list[str]:
    """The first column of the docstring's table: one key (or key pattern) per row."""
    lines = (records.__doc__ or "").splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("=====")]
    assert len(rules) == 3, rules  # above the header, below it, below the last row
    return [line.split()[0] for line in lines[rules[1] + 1 : rules[2]] if line.strip()]


def test_every_key_is_in_the_schema_and_every_schema_row_is_a_key() -> None:
    rows = _schema_rows()
    assert len(rows) > 40
    trial = {
        n: v
        for n, v in _constants().items()
        if not n.startswith("STUDY_") and n not in ("CONSTRAINT_PREFIX", "FIXED_PARAMS")
    }
    # The system attributes Optuna writes, named in the paragraph after the table.
    assert f"`{records.CONSTRAINT_PREFIX}NAME`" in (records.__doc__ or "")
    assert f"`{records.FIXED_PARAMS}`" in (records.__doc__ or "")
    for name, value in trial.items():
        if name.endswith("_AT"):  # a per-level prefix: `output_tok_s@c` of `...@c{C}`
            assert any(r.startswith(value) for r in rows), name
        else:
            assert value in rows, name
    for row in rows:
        stem = row.split("{")[0]
        assert stem in trial.values(), row
    for name, value in _constants("STUDY_").items():
        assert f"`{value}`" in (records.__doc__ or ""), name


@pytest.mark.slow  # a resumed study: an end-to-end run
def test_a_study_written_by_the_previous_release_still_reads(tmp_path: Path) -> None:
    config = study_dir(tmp_path, n_trials=4)
    shutil.copy(OLD_STUDY, tmp_path / "study.db")
    old = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path / 'study.db'}")
    for t in old.get_trials():
        r = records.TrialRecord.of(t)
        assert r.number == t.number and (r.config or r.baseline)
        assert r.output_tok_s or r.failure or r.reused_from is not None
    seen = status(config)
    assert seen["finished"] == 4 and [t["number"] for t in seen["trials"]] == [0, 1, 2, 3]
    best = autotune("best", "--config", str(config), cwd=tmp_path)
    assert best.returncode == 0, best.stderr[-2000:]
    assert "over the unit as it was" in best.stdout or "is the best" in best.stdout
    assert json.loads(autotune("best", "--json", "--config", str(config), cwd=tmp_path).stdout)
    made = autotune("report", "--config", str(config), "--out", str(tmp_path / "r"), cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    more = autotune("start", "--config", str(config), "--n-trials", "5", cwd=tmp_path)
    assert more.returncode == 0, more.stderr[-3000:]
    assert status(config)["finished"] == 5


def _literal_key_uses() -> list[str]:
    """Where a module outside records.py reads or writes a trial's record with a key spelled
    as a string: `x.user_attrs.get("failure")`, `attrs["levels"]`, `set_user_attr("reason", ..)`."""
    import ast

    keys = {
        v for n, v in _constants().items() if not n.startswith("STUDY_") and not n.endswith("_AT")
    } | {records.STARTED_AT}
    found = []
    for path in sorted((REPO / "autotune").rglob("*.py")):
        if path.name == "records.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            target: ast.AST | None = None
            key: ast.AST | None = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                name = node.func.attr
                if name in ("get", "set_user_attr") and node.args:
                    target, key = node.func.value, node.args[0]
                elif name == "set_trial_user_attr" and len(node.args) > 1:
                    target, key = node.func.value, node.args[1]
            elif isinstance(node, ast.Subscript):
                target, key = node.value, node.slice
            if target is None or not isinstance(key, ast.Constant) or key.value not in keys:
                continue
            if "attrs" in ast.unparse(target) or "set_" in ast.unparse(node)[:40]:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_module_but_records_spells_a_trial_key() -> None:
    assert _literal_key_uses() == []


def test_the_architecture_page_shows_the_schema() -> None:
    page = (REPO / "docs" / "architecture.md").read_text()
    section = page.split("## The trial record", 1)[1]
    shown = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert shown == _schema_rows()
