"""deltasieve's Python client: start and follow syncs of a deltasieve service, read its views.

The package needs only httpx: an orchestrator's workers install it without Spark.
"""

from deltasieve.client import Client
from deltasieve.errors import DeltasieveError, ServiceError, SyncFailed, SyncTimeout, Unreachable
from deltasieve.records import Sync, View

__all__ = ["Client", "DeltasieveError", "ServiceError", "Sync", "SyncFailed", "SyncTimeout", "Unreachable", "View"]
