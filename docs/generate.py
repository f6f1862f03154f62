"""Generate ``docs/configuration.md`` from the config registry.

Run: ``.venv/bin/python docs/generate.py`` (``--check`` exits 1 when the file is stale).

The registry (``timeline.config.REGISTRY``) only holds the keys of imported modules, so this
imports ``writers.client`` first (it imports ``metadata.settings``, ``writers.settings`` and
``writers.services.clean``, which register theirs); the ``timeline`` package itself may not import
``writers`` (``tests/test_architecture.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lakebraid.writers.client  # noqa: F401  (registers every config key)
from lakebraid.timeline import config as cfg

DOCS = Path(__file__).resolve().parent
TARGET = DOCS / "configuration.md"
COMMAND = ".venv/bin/python docs/generate.py"


def render(keys: Iterable[cfg.ConfigKey[Any]] | None = None) -> str:
    """The text of docs/configuration.md for ``keys`` (default: the whole registry)."""
    return cfg.render_markdown(keys)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = TARGET.read_text() if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET} ({len(cfg.REGISTRY)} keys)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
