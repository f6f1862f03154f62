"""The embedded session's settings: the defaults under a user's ``conf``, and the parallel
garbage collector kept when the user's driver Java options choose none (no JVM started)."""

from __future__ import annotations

import pytest

from lakebraid.writers.engine.spark.session import JAVA_OPTIONS, session_conf

PARALLEL = "-XX:+UseParallelGC"


def test_the_defaults_choose_the_parallel_collector() -> None:
    conf = session_conf()
    assert conf[JAVA_OPTIONS] == PARALLEL
    assert conf["spark.sql.session.timeZone"] == "UTC"


def test_a_users_setting_overrides_a_default() -> None:
    conf = session_conf({"spark.driver.memory": "1g", "spark.sql.shuffle.partitions": "3"})
    assert conf["spark.driver.memory"] == "1g"
    assert conf["spark.sql.shuffle.partitions"] == "3"
    assert conf[JAVA_OPTIONS] == PARALLEL


def test_java_options_without_a_collector_keep_the_parallel_one() -> None:
    conf = session_conf({JAVA_OPTIONS: "-Dlog4j.configurationFile=x.xml -Xss4m"})
    assert conf[JAVA_OPTIONS] == f"{PARALLEL} -Dlog4j.configurationFile=x.xml -Xss4m"


@pytest.mark.parametrize(
    "options",
    ["-XX:TieredStopAtLevel=1 -XX:+UseSerialGC", "-XX:+UseG1GC", "-XX:-UseParallelGC -Dx=1"],
)
def test_java_options_that_choose_a_collector_are_kept_as_given(options) -> None:
    assert session_conf({JAVA_OPTIONS: options})[JAVA_OPTIONS] == options


def test_an_empty_option_string_gets_the_collector() -> None:
    assert session_conf({JAVA_OPTIONS: ""})[JAVA_OPTIONS] == PARALLEL
