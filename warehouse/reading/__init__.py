"""What the service reads of a stored view: its rows (rows.py) and its statistics in summary
(statistics.py)."""
