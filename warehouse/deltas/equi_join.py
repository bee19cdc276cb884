"""An assembly whose conditions are all equalities, evaluated in Arrow on the driver.

Most views over several sources join on keys: every condition across sites is `a = b`
between two columns of one logical type. Such an assembly means the same as an Arrow hash
join on those columns (NULL matches nothing in both; same types, so no coercion; floating
point is left to Spark, whose `=` holds for NaN = NaN). The delta rules (join_delta.py)
then join a few changed rows with the matching rows of the other fragments, read from
their files with a filter, in milliseconds instead of a Spark job's fraction of a second.

`plan` says whether a view's assembly qualifies; `EquiJoin.rows` evaluates it starting from
the rows of one site, fetching each other site's rows that equal the rows joined so far.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from deltasieve_protocol.types import LogicalType
from warehouse.viewdef import ViewDef
from warehouse.viewdef.decomposition import Link, equality, join_terms


@dataclass(frozen=True)
class EquiJoin:
    """The equalities of an assembly, and the sites it joins by LEFT JOIN."""

    sites: int
    links: list[Link]
    left: frozenset[int]
    outputs: list[str]

    def rows(self, start: int, rows: pa.Table, fetch: Callable[[int, ds.Expression], pa.Table]) -> pa.Table:
        """The view rows made of `rows` of site `start` (its columns), joined with the other
        sites: `fetch(site, wanted)` returns the rows of `site` that satisfy `wanted` (a
        filter, its columns as the site names them). The sites joined by inner joins come
        first, then those joined by LEFT JOIN; when `start` is one of them, its rows join
        inner (only the rows they partner are wanted)."""
        joined, acc = {start}, rows
        order = [s for s in range(self.sites) if s not in self.left] + sorted(self.left)
        while len(joined) < self.sites:
            site = next(s for s in order if s not in joined and self._links(joined, s))
            pairs = self._links(joined, site)
            mine, theirs = [p[0] for p in pairs], [p[1] for p in pairs]
            wanted = reduce(operator.and_, [ds.field(t).isin(pc.unique(acc.column(m)).drop_null()) for m, t in pairs])
            kind = "left outer" if site in self.left else "inner"
            acc = acc.join(fetch(site, wanted), keys=mine, right_keys=theirs, join_type=kind, coalesce_keys=False)
            joined.add(site)
        return acc.select(self.outputs)

    def _links(self, joined: set[int], site: int) -> list[tuple[str, str]]:
        """(column of a joined site, column of `site`) for every equality between them."""
        out = []
        for a, col_a, b, col_b in self.links:
            if a == site and b in joined:
                out.append((col_b, col_a))
            elif b == site and a in joined:
                out.append((col_a, col_b))
        return out


def plan(view: ViewDef) -> EquiJoin | None:
    """The view's assembly as equalities, when every condition across its sites is one
    (`a = b`, both columns, one logical type, not floating point) and every site is tied
    to the others by one; else None (Spark evaluates it).

    >>> from deltasieve_protocol.types import Column, LogicalType
    >>> from warehouse.viewdef import SiteQuery
    >>> cols = lambda *names: [Column(n, LogicalType.parse("int")) for n in names]
    >>> sites = [SiteQuery("a", "", cols("id", "c"), ["id"]), SiteQuery("b", "", cols("cid"), ["cid"])]
    >>> sql = "SELECT `s0`.`id` AS `id`, `s1`.`cid` AS `cid` FROM `site_0` AS `s0` LEFT JOIN `site_1` AS `s1` ON `s1`.`cid` = `s0`.`c`"
    >>> plan(ViewDef("", cols("id", "cid"), ["id"], sites, sql, None, [1])).links
    [(1, 'cid', 0, 'c')]
    >>> plan(ViewDef("", cols("id", "cid"), ["id"], sites, sql.replace("=", ">"), None, [1])) is None
    True
    """
    if view.assembly is None:  # one site: no join to plan
        return None
    types = {(i, c.name): c.type for i, site in enumerate(view.sites) for c in site.columns}
    links: list[Link] = []
    for joined, term in join_terms(view.assembly):
        link = equality(term) if term is not None else None
        if link is None or joined not in (link[0], link[2]):
            return None
        if not hash_equal(types[link[0], link[1]], types[link[2], link[3]]):
            return None
        links.append(link)
    return EquiJoin(len(view.sites), links, frozenset(view.left_sites), [c.name for c in view.columns])


def hash_equal(a: LogicalType, b: LogicalType) -> bool:
    """Whether an Arrow hash join of columns of types `a` and `b` means what Spark's `=`
    means on them: one type, not floating point (Spark's NaN equals NaN).

    >>> hash_equal(LogicalType.parse("int"), LogicalType.parse("int")), hash_equal(LogicalType.parse("float"), LogicalType.parse("float"))
    (True, False)
    """
    return a == b and a.kind != "float"
