"""Views over tables without a key: multisets of rows kept as distinct rows with counts
(multiset.py), across sites (combinations.py), and vanished/appeared rows paired into
updates (matching.py, by the window BestmatchJoin of bestmatch.py).
"""
