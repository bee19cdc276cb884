"""Where a view is published after its syncs: a Delta Lake table, a PostgreSQL table (#37)."""
