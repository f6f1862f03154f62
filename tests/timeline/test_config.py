from __future__ import annotations

import pytest

from lakebraid.timeline import config as cfg
from lakebraid.timeline.errors import ConfigError


def test_registry_keys_have_name_default_and_doc() -> None:
    assert cfg.REGISTRY
    for name, key in cfg.REGISTRY.items():
        assert key.name == name and key.doc.strip()
        assert key.parse(key.default) == key.default  # defaults pass their own checks


def test_options_typed_and_validated() -> None:
    opts = cfg.Options({"heartbeat.expiry.ms": "1500", "lock.timeout.seconds": 2})
    assert opts.get(cfg.HEARTBEAT_EXPIRY_MS) == 1500
    assert opts.get(cfg.LOCK_TIMEOUT_S) == 2.0
    assert opts.get(cfg.HEARTBEAT_INTERVAL_MS) == cfg.HEARTBEAT_INTERVAL_MS.default
    assert opts.given() == {"heartbeat.expiry.ms": 1500, "lock.timeout.seconds": 2.0}


def test_unknown_key_suggests_the_close_one() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'heartbeat\.expiry\.ms'"):
        cfg.Options({"heartbeat.expiry.msec": 5})


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("heartbeat.expiry.ms", "soon", "not a valid int"),
        ("heartbeat.expiry.ms", 0, "greater"),
        ("lock.timeout.seconds", -1, "greater"),
        ("heartbeat.interval.ms", True, "not a valid int"),
    ],
)
def test_bad_values_name_key_and_value(name, value, problem) -> None:
    with pytest.raises(ConfigError, match=problem) as err:
        cfg.Options({name: value})
    assert name in str(err.value)
