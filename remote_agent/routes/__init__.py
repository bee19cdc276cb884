"""The agent's routes, one router per resource: health, schema, extraction."""
