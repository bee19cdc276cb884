"""Format numbers of the state deltasieve keeps between runs, and the check every reader makes.

Format 1 is what deltasieve wrote before it numbered its state (up to commit 41bc7ec):
data without a "format" field. A reader accepts every format up to the one it writes and
refuses a newer one, which it could only misread.
"""

from __future__ import annotations

from warehouse.errors import FormatError

#: Format of a stored view (CURRENT, versions/<N>/meta.json): 2 says its number, else as 1;
#: 3 may keep a fragment as a base under an overlay (layers.py) and the update statistics as a histogram;
#: 4 may keep the rows of a view over several sites so too (view-overlay/).
STORAGE_FORMAT = 4
#: Format of a view definition's JSON in the catalog: 2 says its number, else as 1.
DEFINITION_FORMAT = 2
#: The format of the definition of a multiset view (tables without a key, `multiset`):
#: readers read up to it; keyed views are still written in DEFINITION_FORMAT, so that a
#: deltasieve that predates multisets keeps reading them and refuses only these.
MULTISET_DEFINITION_FORMAT = 3
#: The format of the definition of a multiset view over several sites (an assembly of
#: combinations, combinations.py): a deltasieve that kept multisets of one site only
#: refuses it rather than read its sites as one.
JOINED_MULTISET_DEFINITION_FORMAT = 4
#: The format of state written without a "format" field.
UNNUMBERED_FORMAT = 1


def read_format(data: dict, known: int, what: str) -> int:
    """The format `data` is written in, if this deltasieve reads it (formats 1 to `known`).

    Raises:
        FormatError: the format is newer than `known`, or not a format number.

    >>> read_format({"version": 3}, STORAGE_FORMAT, "view 'v'")
    1
    >>> read_format({"format": 9, "version": 3}, 2, "view 'v'")
    Traceback (most recent call last):
    ...
    warehouse.errors.FormatError: view 'v' is stored in format 9, newer than this deltasieve reads (formats 1 to 2): upgrade deltasieve to use it
    """
    number = data.get("format", UNNUMBERED_FORMAT)
    if type(number) is not int or number < UNNUMBERED_FORMAT:
        raise FormatError(f"{what} has the format {number!r}, which is not a format number")
    if number > known:
        raise FormatError(
            f"{what} is stored in format {number}, newer than this deltasieve reads (formats {UNNUMBERED_FORMAT} to {known}): upgrade deltasieve to use it"
        )
    return number
