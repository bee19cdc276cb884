"""Version numbers of the state deltasieve keeps between runs, and the check every reader makes.

Each stored format has one number, written with the data as its "format" field. A reader
takes that number only: data without one, or with another, is refused (FormatError) with
where it is stored, the number found and the one expected. deltasieve reads no state of its
development before 0.1.0; docs/operations/upgrading.md says what to do with such state.

The formats and their numbers (each owner writes its number with the data):

- a stored view's CURRENT and versions/<N>/meta.json: STORAGE_FORMAT (store/versions.py);
  the files under a version's directory (fragments, deltas, statistics) are of the
  format its meta.json names;
- a view definition, in the catalog and in a version's meta.json: one number per kind of
  view (viewdef/model.py), below;
- the sample of a version, sample.json: SAMPLE_FORMAT (sample/view_sample.py);
- the state a strategy keeps per site: timestamp.json, row_version.json,
  snapshot_diff.json, each its STATE_FORMAT (strategies/);
- the catalog's tables: its SQLite user_version (service/catalog_migrations.py).
"""

from __future__ import annotations

from warehouse.errors import FormatError

#: Format of a stored view (CURRENT, versions/<N>/meta.json): a fragment may be kept as a
#: base under an overlay (layers.py), the update statistics as a histogram, and the rows of
#: a view over several sites so too (view-overlay/).
STORAGE_FORMAT = 4
#: Format of the definition of a keyed view.
DEFINITION_FORMAT = 2
#: Format of the definition of a multiset view (tables without a key, `multiset`) of one site.
MULTISET_DEFINITION_FORMAT = 3
#: Format of the definition of a multiset view over several sites (an assembly of
#: combinations, combinations.py).
JOINED_MULTISET_DEFINITION_FORMAT = 4


def check_format(data: dict, expected: int, what: str) -> None:
    """Refuse `data` unless its "format" is `expected`; `what` says where it is stored.

    Raises:
        FormatError: no format number, or another one.

    >>> check_format({"format": 4, "version": 3}, STORAGE_FORMAT, "view 'v'")
    >>> check_format({"format": 9, "version": 3}, 4, "view 'v'")
    Traceback (most recent call last):
    ...
    warehouse.errors.FormatError: view 'v' is stored in format 9, and this deltasieve reads format 4: upgrade deltasieve to read it
    >>> check_format({"version": 3}, 4, "view 'v'")
    Traceback (most recent call last):
    ...
    warehouse.errors.FormatError: view 'v' is stored without a format number, and this deltasieve reads format 4: it was written before deltasieve 0.1.0; create it again (see Upgrading in the operations docs)
    """
    found = data.get("format")
    if type(found) is int and found == expected:
        return
    if found is None:
        raise FormatError(
            f"{what} is stored without a format number, and this deltasieve reads format {expected}: "
            "it was written before deltasieve 0.1.0; create it again (see Upgrading in the operations docs)",
            found,
            expected,
        )
    if type(found) is int and found > expected:
        hint = "upgrade deltasieve to read it"
    else:
        hint = "it was written by another deltasieve; create it again (see Upgrading in the operations docs)"
    raise FormatError(
        f"{what} is stored in format {found!r}, and this deltasieve reads format {expected}: {hint}", found, expected
    )
