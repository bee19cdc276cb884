"""The contract between the agent and the warehouse: wire models, types, row encoding, frames,
the site-query grammar and the sketch tables. Both sides import it; it imports neither."""
