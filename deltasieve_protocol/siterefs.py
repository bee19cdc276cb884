"""Site references: a site query named by a digest of itself, so that a request need not
carry its text again.

A control message names its site query in full (`site`: the SQL, the key, the columns,
often several hundred bytes) or by reference (`site_ref`: 22 characters, the base64 of a
128-bit BLAKE2b digest of the site as sent in full). An agent remembers the sites it was
last sent in full (`SiteRefs`, in memory) and reads a reference as that site, then checks
it as it checks any site query: a reference only saves bytes, it grants nothing. An agent
that does not hold the reference (restarted, or it dropped the site for newer ones)
answers 409 with code UNKNOWN_SITE before reading anything, and the warehouse sends the
request again in full. The warehouse sends a reference only to an agent that has answered
a request carrying that site in full.

The digest is cryptographic so that no one who may call the agent can make another site
answer to a reference the warehouse uses: two sites with one reference would need a
BLAKE2b collision.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections import OrderedDict

#: The error code of a reference the agent does not hold.
UNKNOWN_SITE = "unknown_site"
#: Bytes of the digest: 128 bits make a collision between the sites of one agent beyond reach.
REF_BYTES = 16
#: Characters of a reference (unpadded base64url of REF_BYTES).
REF_CHARS = 22
#: Bytes of site text (its canonical JSON) an agent remembers: a site is a few hundred bytes,
#: so this holds the sites of tens of thousands of views. A bound by count (1,024 sites until
#: #52's soak) made an agent serving a thousand tables forget a site before its view's next
#: sync whenever it had seen more sites than that since: an LRU read in a cycle larger than
#: itself never hits, and each miss costs a 409 and a second round trip.
REMEMBERED_BYTES = 32 * 2**20


def site_ref(site: dict) -> str:
    """The reference of a site (a SiteSpec as JSON): the same site, the same reference.

    >>> site_ref({"sql": "SELECT t.id FROM t", "key": ["id"], "columns": [{"name": "id", "type": "int"}]})
    '-LUV1IPU6kK7xbBwUkj8eA'
    >>> len(site_ref({"sql": "x", "key": ["a"], "columns": []})) == REF_CHARS
    True
    """
    return _ref(_canonical(site))


def _canonical(site: dict) -> bytes:
    return json.dumps(site, sort_keys=True, separators=(",", ":"), default=str).encode()


def _ref(canonical: bytes) -> str:
    digest = hashlib.blake2b(canonical, digest_size=REF_BYTES, person=b"deltasieve.site").digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def by_reference(control: dict, ref: str) -> dict:
    """The control message with its site named by `ref` instead of in full.

    >>> by_reference({"protocol": 3, "site": {"sql": "x"}, "seed": 1}, "r")
    {'protocol': 3, 'seed': 1, 'site_ref': 'r'}
    """
    out = {k: v for k, v in control.items() if k != "site"}
    out["site_ref"] = ref
    return out


class SiteRefs:
    """The sites an agent was sent in full, by reference, up to `limit_bytes` of their text;
    the least recently used is forgotten first.

    >>> a, b = {"sql": "a"}, {"sql": "b"}
    >>> refs = SiteRefs(limit_bytes=len(_canonical(a)))
    >>> refs.remember(a) == site_ref(a), refs.resolve(site_ref(a))
    (True, {'sql': 'a'})
    >>> _ = refs.remember(b); refs.resolve(site_ref(a)) is None, len(refs)
    (True, 1)
    """

    def __init__(self, limit_bytes: int = REMEMBERED_BYTES):
        self.limit_bytes = limit_bytes
        self._sites: OrderedDict[str, tuple[dict, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sites)

    def remember(self, site: dict) -> str:
        canonical = _canonical(site)
        ref = _ref(canonical)
        with self._lock:
            old = self._sites.pop(ref, None)
            self._bytes += len(canonical) - (old[1] if old else 0)
            self._sites[ref] = (site, len(canonical))
            while self._bytes > self.limit_bytes and len(self._sites) > 1:
                _, (_, size) = self._sites.popitem(last=False)
                self._bytes -= size
        return ref

    def resolve(self, ref: str) -> dict | None:
        with self._lock:
            held = self._sites.get(ref)
            if held is not None:
                self._sites.move_to_end(ref)
        return held[0] if held else None
