"""Destinations: where a view is published after every sync that changed it (base.py)."""
