"""The service accepts exactly the strategies the warehouse registers, with one default, and its
sync settings reach every sync."""

import dataclasses
import typing

from service.models import Strategy, ViewIn
from service.settings import ServiceSettings
from warehouse.options import SyncOptions
from warehouse.strategies import STRATEGIES
from warehouse.view_options import ViewOptions


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


def test_a_sync_takes_every_sync_setting_the_service_has():
    """Each field of SyncOptions the settings name too is the settings' value, none at its default:
    a setting added to both and not to `sync_options` fails here."""
    settings = ServiceSettings(
        hash_bits=64,
        prior_mode="paper",
        default_prior=0.2,
        grouping="group",
        plan_partitions=3,
        agent_read_timeout_s=7.0,
        agent_deadline_s=9.0,
        agent_retries=4,
        agent_retry_backoff_s=1.5,
        sketch_seed_rotation=5,
        small_sync_rows=1234,
    )
    view = ViewOptions.from_stored({"strategy": "sketch"})
    options = settings.sync_options(view, verify=True)
    shared = [f.name for f in dataclasses.fields(SyncOptions) if f.name in ServiceSettings.model_fields]
    assert len(shared) == 11
    for name in shared:
        assert getattr(options, name) == getattr(settings, name) != getattr(SyncOptions(), name), name
    assert (options.strategy, options.verify, options.view_options) == ("sketch", True, view)
