"""A uniform random sample of a view kept from each sync's delta (view_sample.py) with its
deferred refresh from the candidate log (refresh.py).
"""
