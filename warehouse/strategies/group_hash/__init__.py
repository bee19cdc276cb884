"""group_hash: groups of stable tuples with one hash each; the strategy (strategy.py) and group
selection and hashing on the executors (grouping.py).
"""
