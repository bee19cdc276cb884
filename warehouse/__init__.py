"""deltasieve's warehouse side: Spark storage, statistics, planning, extraction, deltas."""
