"""row_version: read only the rows PostgreSQL wrote since the last sync's snapshot; the
strategy (strategy.py) and the snapshot logic it keeps (xid_snapshots.py).
"""
