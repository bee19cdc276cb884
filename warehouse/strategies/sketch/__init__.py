"""sketch: set reconciliation with an IBLT; the strategy (strategy.py), the table a fragment
keeps (tables.py), its background preparation after a commit (prep.py), and the sketch of
keys alone that the change-stamp strategies reconcile with (keys.py).
"""
