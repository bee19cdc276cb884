"""deltasieve's warehouse service: the REST API over catalog, syncs and stored views."""
