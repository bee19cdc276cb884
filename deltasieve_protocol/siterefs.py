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
#: Sites an agent remembers: a few per view it serves, each a few hundred bytes.
REMEMBERED = 1024


def site_ref(site: dict) -> str:
    """The reference of a site (a SiteSpec as JSON): the same site, the same reference.

    >>> site_ref({"sql": "SELECT t.id FROM t", "key": ["id"], "columns": [{"name": "id", "type": "int"}]})
    '-LUV1IPU6kK7xbBwUkj8eA'
    >>> len(site_ref({"sql": "x", "key": ["a"], "columns": []})) == REF_CHARS
    True
    """
    canonical = json.dumps(site, sort_keys=True, separators=(",", ":"), default=str).encode()
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
    """The sites an agent was sent in full, by reference; the least recently used is forgotten first.

    >>> refs = SiteRefs(limit=1)
    >>> a, b = {"sql": "a"}, {"sql": "b"}
    >>> refs.remember(a) == site_ref(a), refs.resolve(site_ref(a))
    (True, {'sql': 'a'})
    >>> _ = refs.remember(b); refs.resolve(site_ref(a)) is None
    True
    """

    def __init__(self, limit: int = REMEMBERED):
        self.limit = limit
        self._sites: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, site: dict) -> str:
        ref = site_ref(site)
        with self._lock:
            self._sites[ref] = site
            self._sites.move_to_end(ref)
            while len(self._sites) > self.limit:
                self._sites.popitem(last=False)
        return ref

    def resolve(self, ref: str) -> dict | None:
        with self._lock:
            site = self._sites.get(ref)
            if site is not None:
                self._sites.move_to_end(ref)
        return site
