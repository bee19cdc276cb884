"""The agent's memory of site references: bounded by the bytes of the sites it holds, large
enough that an agent serving thousands of tables finds every view's site at its next sync."""

from __future__ import annotations

from deltasieve_protocol.siterefs import SiteRefs, _canonical, site_ref


def _site(table: int) -> dict:
    """A mirrored table's site as the warehouse sends it: a dozen columns, a few hundred bytes."""
    columns = [{"name": f"column_{c}", "type": "text" if c % 2 else "int"} for c in range(12)]
    names = ", ".join(f"t.column_{c}" for c in range(12))
    return {"sql": f"SELECT {names} FROM erp_table_{table:05d} t", "key": ["column_0"], "columns": columns}


def test_an_agent_of_5000_tables_finds_every_site_on_the_next_round():
    # the soak's agents serve 1,000 tables each, read in a cycle: a memory of 1,024 sites by
    # count missed every reference once a view had two sites
    refs = SiteRefs()
    sites = [_site(t) for t in range(5_000)] + [_site(t) | {"key": ["column_1"]} for t in range(5_000)]
    for site in sites:
        refs.remember(site)
    assert all(refs.resolve(site_ref(site)) == site for site in sites)


def test_the_least_recently_used_sites_go_first_once_their_bytes_exceed_the_bound():
    sites = [_site(t) for t in range(10)]
    size = len(_canonical(sites[0]))
    refs = SiteRefs(limit_bytes=4 * size)
    for site in sites[:4]:
        refs.remember(site)
    assert refs.resolve(site_ref(sites[0])) == sites[0]  # now the most recently used
    refs.remember(sites[4])
    assert refs.resolve(site_ref(sites[1])) is None and refs.resolve(site_ref(sites[0])) == sites[0]
    refs.remember(sites[4])  # remembering a held site again costs no room
    assert len(refs) == 4 and refs.resolve(site_ref(sites[2])) == sites[2]
