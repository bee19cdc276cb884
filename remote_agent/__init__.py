"""deltasieve's read-only agent: runs next to a legacy database and answers extractions."""
