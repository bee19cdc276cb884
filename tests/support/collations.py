"""Text keys whose order under a language collation is not their byte order (PostgreSQL)."""

from __future__ import annotations

import pytest

#: Stems and variants of them whose order under a language collation (case and accents
#: weigh last) differs from their byte order ("Zoo" < "apple" byte-wise, not in English).
STEMS = ["apple", "zoo", "eclair", "resume", "strasse", "a b", "a-b", "ab", "co-op", "coop", "naive"]
VARIANTS = [str.lower, str.upper, str.title, lambda s: s.replace("e", "é"), lambda s: s.replace("ss", "ß")]


def language_collation(conn) -> str:
    """A collation of the server that orders text otherwise than byte by byte (ICU first)."""
    have = {r[0] for r in conn.execute("SELECT collname FROM pg_collation")}
    for name in ("en-x-icu", "und-x-icu", "en_US.utf8", "en_US"):
        if name in have:
            return name
    pytest.fail(f"the test server has no language collation (it has {sorted(have)[:10]}...)")
