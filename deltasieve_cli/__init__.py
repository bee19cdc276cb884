"""`deltasieve`: the command-line client of the warehouse service's REST API.

A pure client: it talks to the service over HTTP (httpx) and imports nothing of
`service`, `warehouse` or `remote_agent`, so it runs wherever the API can be reached.
"""
