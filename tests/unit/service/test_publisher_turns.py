"""The publisher's rule on a real catalog: a destination goes to a worker only when there is
something to publish, so an idle service with views that never synced stays idle."""

from __future__ import annotations

import time

import pytest

from service.catalog import Catalog
from service.publishing import Publisher
from service.settings import ServiceSettings
from warehouse.view_options import ViewOptions

WATCH_S = 1.5


class CountingPublisher(Publisher):
    """The service's publisher, counting the turns its workers take."""

    turns = 0

    def _turn(self, *args):
        self.turns += 1
        super()._turn(*args)


@pytest.fixture
def catalog(tmp_path):
    catalog = Catalog(tmp_path / "catalog.db")
    yield catalog
    catalog.close()


def watched(tmp_path, catalog: Catalog) -> CountingPublisher:
    """A publisher started on `catalog`, stopped after WATCH_S."""
    publisher = CountingPublisher(ServiceSettings(data_dir=tmp_path), catalog)
    publisher.start()
    time.sleep(WATCH_S)
    publisher.stop()
    return publisher


def add_view(catalog: Catalog, name: str) -> None:
    options = ViewOptions.from_stored({"strategy": "auto", "destinations": [{"kind": "delta"}]})
    catalog.add_view(name, "SELECT p.id FROM crm.people p", {}, options)


def test_a_view_without_a_succeeded_sync_is_never_handed_to_a_worker(tmp_path, catalog):
    add_view(catalog, "never")
    add_view(catalog, "failed")
    catalog.update_sync(catalog.queue_sync("failed").id, status="failed")
    assert watched(tmp_path, catalog).turns == 0


def test_a_destination_caught_up_as_far_as_it_can_waits_for_the_next_sync(tmp_path, catalog):
    # a succeeded sync whose delta and version are not stored (removed by hand, say): one
    # turn finds nothing to build from and ends; the worker's end does not start another
    add_view(catalog, "bare")
    catalog.update_sync(catalog.queue_sync("bare").id, status="succeeded")
    publisher = watched(tmp_path, catalog)
    assert publisher.turns == 1
    applied, error = catalog.publication("bare", "delta")
    assert (applied, error) == (None, None)
