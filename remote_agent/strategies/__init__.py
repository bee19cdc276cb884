"""The agent's side of each strategy, one module each, over the checks they share.

`extraction` answers /v1/extract: one scan serves the group-hash units (`group_hash`) and
the per-tuple hashes (`tuple_hash`) of a request together; `range_checksum` answers
/v1/ranges and `fetch` answers /v1/fetch.
"""
