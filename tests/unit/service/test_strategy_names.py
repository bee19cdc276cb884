"""The service accepts exactly the strategies the warehouse registers, with one default."""

import typing

from service.models import Strategy, ViewIn
from service.settings import ServiceSettings
from warehouse.options import SyncOptions
from warehouse.strategies import STRATEGIES


def test_the_api_offers_every_registered_strategy_and_no_other():
    assert list(typing.get_args(Strategy)) == list(STRATEGIES)


def test_defaults_are_defined_once():
    view = ViewIn(name="v", sql="SELECT 1")
    options, settings = SyncOptions(), ServiceSettings()
    assert view.strategy == options.strategy
    for name in (
        "hash_bits",
        "prior_mode",
        "default_prior",
        "grouping",
        "agent_read_timeout_s",
        "agent_deadline_s",
        "agent_retries",
        "agent_retry_backoff_s",
        "sketch_seed_rotation",
    ):
        assert getattr(settings, name) == getattr(options, name), name
