"""Spark settings: local tuning by default, SERVICE_SPARK_CONF on top; bad JSON is refused at start."""

from __future__ import annotations

import pytest

from service.__main__ import main
from service.settings import ServiceSettings
from warehouse.spark import build_session


def test_spark_properties_come_from_the_environment_as_json(monkeypatch):
    monkeypatch.setenv("SERVICE_SPARK_CONF", '{"spark.sql.shuffle.partitions": "3"}')
    settings = ServiceSettings()
    assert settings.spark_conf == {"spark.sql.shuffle.partitions": "3"}
    spark = build_session("local[2]")
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"  # two per local core
    assert spark.conf.get("spark.sql.adaptive.enabled") == "false"
    try:
        assert build_session("local[2]", extra_conf=settings.spark_conf).conf.get("spark.sql.shuffle.partitions") == "3"
    finally:  # back to the default, for the other tests sharing this process's session
        build_session("local[2]")


def _refused_at_start(monkeypatch, capsys, variable: str, value: str) -> str:
    """What the service prints when `variable`=`value` stops it at start (exit status 2)."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exc:
        main(["--port", "1"])
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_a_property_list_that_is_not_json_stops_the_service_with_a_message(monkeypatch, capsys):
    assert "spark_conf" in _refused_at_start(monkeypatch, capsys, "SERVICE_SPARK_CONF", "spark.executor.memory=8g")


@pytest.mark.parametrize("master", ["local[*]", "local[2]", "spark://10.0.0.5:7077", "spark://a:7077,b:7077"])
def test_spark_master_urls_of_every_form_are_taken(monkeypatch, master):
    monkeypatch.setenv("SERVICE_SPARK_MASTER", master)
    assert ServiceSettings().spark_master == master


@pytest.mark.parametrize("master", ["10.0.0.5:7077", "spark://10.0.0.5", "local[two]"])
def test_a_spark_master_that_is_no_url_stops_the_service_with_a_message(monkeypatch, capsys, master):
    message = _refused_at_start(monkeypatch, capsys, "SERVICE_SPARK_MASTER", master)
    assert f"{master!r} is not a Spark master URL" in message


@pytest.mark.parametrize("text, bits", [("64", 64), ("128", 128), (" 64 ", 64)])
def test_the_group_hash_width_comes_from_the_environment(monkeypatch, text, bits):
    monkeypatch.setenv("SERVICE_HASH_BITS", text)
    assert ServiceSettings().hash_bits == bits


@pytest.mark.parametrize("text", ["96", "sixty-four", ""])
def test_a_group_hash_width_other_than_64_or_128_stops_the_service_with_a_message(monkeypatch, capsys, text):
    assert "hash_bits" in _refused_at_start(monkeypatch, capsys, "SERVICE_HASH_BITS", text)
