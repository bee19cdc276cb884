"""Planning and statistics: probabilities and the cost model with group selection
(cost_model.py), wire sizes measured on a sample (wire_sizes.py), the update-statistics
histogram (update_counts.py) and the summaries the API serves (statistics.py).
"""
