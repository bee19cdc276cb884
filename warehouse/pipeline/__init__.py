"""The sync pipeline: one sync of a view as ordered steps (sync.py), the per-site part
(site_sync.py), what a sync is given (options.py) and records (metrics.py), and the agent's
HTTP client that counts every byte (agent_client.py).
"""
