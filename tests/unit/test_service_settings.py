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


def test_a_property_list_that_is_not_json_stops_the_service_with_a_message(monkeypatch, capsys):
    monkeypatch.setenv("SERVICE_SPARK_CONF", "spark.executor.memory=8g")
    with pytest.raises(SystemExit) as exc:
        main(["--port", "1"])
    assert exc.value.code == 2
    assert "spark_conf" in capsys.readouterr().err
