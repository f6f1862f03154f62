"""Random schema evolution on tables of both types against a plain model (on the tests'
``pythonpath`` as ``evolution_fixtures``): upserts that add columns (of several types, a text
dictionary among them), leave known columns out (they become null in the rows updated), give
a narrower integer or float than the table's (widened) or a wider one (refused by name on every
table, nothing written), deletes, and data compactions of the merge-on-read table at random
points (``evolve``); reads compared with the model now and as of every instant
(``check_history``)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import InputError

OPTIONS = {"metadata.compact.max.log.files": 3, "metadata.compact.log.ratio": 0}
KINDS = ["int32", "int64", "float32", "float64", "string", "dictionary"]
# what each kind of new column is given as in a later write: its own type, a narrower one
# (widened into the table's) or the same values in another encoding; now and then a wider
# type (``WIDER``: refused)
LATER = {
    "int32": ["int32"],
    "int64": ["int64", "int32"],
    "float32": ["float32"],
    "float64": ["float64", "float32"],
    "string": ["string", "dictionary"],
    "dictionary": ["dictionary", "string"],
}
WIDER = {"int32": "int64", "float32": "float64"}
Model = dict[str, dict[str, Any]]


def column(rng: random.Random, kind: str, n: int) -> pa.Array:
    if kind in ("int32", "int64"):
        return pa.array([rng.randrange(-50, 50) for _ in range(n)], getattr(pa, kind)())
    if kind in ("float32", "float64"):
        return pa.array([rng.random() for _ in range(n)], getattr(pa, kind)())
    text = pa.array([rng.choice(["x", "y", None]) for _ in range(n)], pa.string())
    return text.dictionary_encode() if kind == "dictionary" else text


def batch(rng: random.Random, keys: list[str], n: int, ts: int, extra: dict[str, str]) -> pa.Table:
    """``n`` distinct keys of ``keys``, random days (keys move), ``extra`` columns by kind."""
    ids = rng.sample(keys, n)
    data: dict[str, pa.Array] = {
        "id": pa.array(ids),
        "day": pa.array([f"d{rng.randrange(3)}" for _ in ids]),
        "ts": pa.array([ts + rng.randrange(3) for _ in ids], pa.int64()),
        "amount": pa.array([rng.random() for _ in ids]),
    }
    for name, kind in extra.items():
        data[name] = column(rng, kind, n)
    return pa.table(data)


def later(rng: random.Random, kind: str) -> str:
    """The type a later write gives a column added as ``kind``."""
    return WIDER[kind] if kind in WIDER and rng.random() < 0.15 else rng.choice(LATER[kind])


def applied(model: Model, data: pa.Table) -> None:
    """An upsert in the model: a row replaces the stored one unless its ts is lower (event
    time); columns it leaves out are null in the rows it replaces."""
    for row in data.to_pylist():
        old = model.get(row["id"])
        if old is None or row["ts"] >= old["ts"]:
            model[row["id"]] = row


def matches(client: WriteClient, model: Model, as_of: str | None = None) -> None:
    table = client.read_arrow(as_of)
    found = {r["id"]: r for r in table.to_pylist()}
    assert len(found) == table.num_rows, "a key appears twice"
    assert set(found) == set(model)
    names = [n for n in table.column_names if not n.startswith("_braid")]
    for key, expected in model.items():
        got = {n: found[key][n] for n in names}
        assert got == {n: expected.get(n) for n in names}, key


def upsert_all(writes: Sequence[tuple[WriteClient, Any]]) -> list[str] | None:
    """Each (table, its rows: a pyarrow table or a Spark DataFrame) upserted, the instants;
    None when every table refused its rows (the same error on each, naming the column)."""
    done, refused = [], []
    for client, rows in writes:
        try:
            done.append(client.upsert(rows))
        except InputError as exc:
            refused.append(str(exc).split(" [table ")[0])
    assert not (done and refused), refused
    if refused:
        assert len(set(refused)) == 1 and "in the table" in refused[0], refused
        return None
    return done


def evolve(
    rng: random.Random,
    clients: list[WriteClient],
    write: Callable[[pa.Table], list[str] | None],
    steps: int,
) -> list[tuple[list[str], Model]]:
    """Random steps on ``clients`` (the last one merge-on-read); each completed step's
    instants (one per client) and the model after it."""
    keys = [f"k{i:03d}" for i in range(50)]
    first = batch(rng, keys, 30, 0, {})
    model: Model = {r["id"]: r for r in first.to_pylist()}
    history = [([c.bulk_insert(first) for c in clients], dict(model))]
    known: dict[str, str] = {}  # the columns added so far, by the kind they were added as
    for step in range(steps):
        if rng.random() < 0.2:
            clients[-1].compact(min_log_files=1)
        if rng.random() < 0.2:
            gone = rng.sample(keys, 6)
            instants = [c.delete(gone) for c in clients]
            model = {k: v for k, v in model.items() if k not in gone}
            history.append((instants, dict(model)))
            continue
        extra = {n: later(rng, k) for n, k in known.items() if rng.random() < 0.6}
        if rng.random() < 0.35:
            name, kind = f"c{step}", rng.choice(KINDS)
            extra[name] = known[name] = kind
        data = batch(rng, keys, 15, 10 * (step + 1), extra)
        done = write(data)
        if done is None:  # refused: nothing written, the model stands
            continue
        applied(model, data)
        history.append((done, dict(model)))
        for client in clients:
            matches(client, model)
    return history


def check_history(clients: list[WriteClient], history: list[tuple[list[str], Model]]) -> None:
    for instants, model in history:
        for client, instant in zip(clients, instants, strict=True):
            matches(client, model, instant)
