"""The README's Python examples run as written (inputs defined, results as the comments say)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_use_example_runs_and_says_what_it_does(tmp_path, monkeypatch, spark) -> None:
    monkeypatch.chdir(tmp_path)
    (use,) = [b for b in BLOCKS if "WriteClient.create" in b]
    scope: dict[str, object] = {}
    exec(compile(use, "README.md", "exec"), scope)
    c = scope["c"]
    assert c.read_arrow(as_of=scope["t1"]).num_rows == 3  # type: ignore[attr-defined]
    now = {r["trip_id"]: r["fare"] for r in c.read_arrow().to_pylist()}  # type: ignore[attr-defined]
    assert now == {"trip-1": 13.0, "trip-3": 31.0, "trip-4": 9.5}
    found = c.lookup(["trip-3", "nope"])  # type: ignore[attr-defined]
    assert found["nope"] is None and found["trip-3"].partition == "day=2024-01-02"
    assert c.read(where="fare > 10 and day = '2024-01-02'").count() == 1  # type: ignore[attr-defined]
