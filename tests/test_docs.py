"""docs/configuration.md is generated from the config registry and must not go stale."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from lakebraid.timeline import config as cfg

REPO = Path(__file__).resolve().parent.parent
CONFIG_DOC = REPO / "docs" / "configuration.md"
STALE = "docs/configuration.md is stale: run .venv/bin/python docs/generate.py"


def _generator() -> ModuleType:
    """docs/generate.py (not a package module); importing it registers every config key."""
    spec = importlib.util.spec_from_file_location(
        "lakebraid_docs_generate", REPO / "docs" / "generate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATE = _generator()


def test_configuration_doc_is_fresh() -> None:
    assert CONFIG_DOC.exists(), STALE
    assert CONFIG_DOC.read_text() == GENERATE.render(), STALE


def test_every_registered_key_is_documented() -> None:
    text = CONFIG_DOC.read_text()
    missing = [name for name in cfg.REGISTRY if f"| `{name}` |" not in text]
    assert not missing, f"{missing} undocumented; {STALE}"
    for module_key in ("clean.retain.commits", "write.target.file.rows", "metadata.lookup.threads"):
        assert module_key in cfg.REGISTRY  # writers/metadata keys are registered before rendering


def test_staleness_check_detects_a_new_key() -> None:
    extra = cfg.ConfigKey("zz.docs.test.extra", int, 1, "A key only this test knows.")
    rendered = GENERATE.render([*cfg.REGISTRY.values(), extra])
    assert "zz.docs.test.extra" in rendered
    assert rendered != CONFIG_DOC.read_text()
    assert "zz.docs.test.extra" not in cfg.REGISTRY  # the real registry is untouched


def test_staleness_check_detects_a_changed_doc() -> None:
    changed = [
        cfg.ConfigKey(k.name, k.type, k.default, k.doc + " (changed)", k.check)
        if k.name == "lock.timeout.seconds"
        else k
        for k in cfg.REGISTRY.values()
    ]
    assert GENERATE.render(changed) != CONFIG_DOC.read_text()


def test_generator_names_itself() -> None:
    assert "`.venv/bin/python docs/generate.py`" in GENERATE.render()
    assert "python -m timeline.config" not in CONFIG_DOC.read_text()
