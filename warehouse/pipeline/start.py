"""The first step of a sync: what it starts from (`begin` → `Start`).

The view's current version, and whether its rows still follow the definition being synced:
a redefinition waiting to be applied is either read in full (`old`) or, when it only
leaves columns out, synced as usual from the stored rows projected to the columns kept
(`projected`, the projection being this step's one piece of work).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from warehouse.pipeline import redefine
from warehouse.sample import view_sample
from warehouse.store.versions import Version
from warehouse.strategies.sync_context import SyncContext
from warehouse.viewdef import ViewDef
from warehouse.viewdef.redefinition import projection


@dataclass(frozen=True)
class Start:
    """Where a sync starts: the versions it reads and the redefinition it applies, if any."""

    #: The view's current version when the sync began (None: the view was never synced).
    stored: Version | None
    #: The version the sites sync from: None for a load, and for a redefinition read in full.
    current: Version | None
    #: A redefinition read in full: the definition the stored rows follow (None: none).
    old: ViewDef | None
    #: A redefinition that leaves columns out: the definition the stored rows follow, which
    #: `current` holds projected to the columns kept (None: none).
    projected: ViewDef | None
    #: The sync's scratch folder, discarded when it ends.
    staging: Path
    #: `current`'s random sample and its state (view_sample.py), read once (None: it has none).
    sample: tuple[pa.Table, view_sample.SampleState] | None

    @property
    def number(self) -> int:
        """The number of the version the sync commits."""
        return self.stored.number + 1 if self.stored is not None else 1


def begin(ctx: SyncContext, view: ViewDef, base: Version | None = None, meta: Mapping[str, Any] | None = None) -> Start:
    """Where a sync of `view` starts. `base`: a version to sync from instead of the current one
    (its copy widened to the types of `view`: schema_policy.py), whose `meta` says the
    definition it replaced."""
    stored = ctx.store.current()
    old = redefine.pending(stored, view)  # a redefinition to apply
    if old is not None and old.to_json() == (meta or {}).get("definition_before"):
        old = None  # not a redefinition: a widening in place, from `base`
    projected = old if old is not None and projection(old, view) is not None else None
    if projected is not None:  # columns left out: synced as usual from the stored rows projected
        assert stored is not None, "a projection redefines stored rows"
        old = None
        base = ctx.timed(
            "project_rows", redefine.projected_base, ctx.spark, ctx.store, stored, projected, view, ctx.sync_id
        )
    current = None if old is not None else (base or stored)
    staging = ctx.store.staging(ctx.sync_id)
    return Start(stored, current, old, projected, staging, view_sample.load(current))
