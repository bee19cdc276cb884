"""The checked-in OpenAPI documents match what the apps generate."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import export_openapi  # noqa: E402


def test_openapi_documents_are_current():
    for name, text in export_openapi.documents().items():
        stored = (ROOT / "openapi" / name).read_text()
        assert stored == text, f"openapi/{name} is stale: run python scripts/export_openapi.py"


def test_contract_paths_are_documented():
    service = json.loads((ROOT / "openapi" / "service.json").read_text())
    for path in (
        "/health",
        "/v1/sources",
        "/v1/sources/{name}",
        "/v1/views",
        "/v1/views/{name}",
        "/v1/views/{name}/syncs",
        "/v1/views/{name}/syncs/{sync_id}",
        "/v1/views/{name}/syncs/{sync_id}/delta",
        "/v1/views/{name}/rows",
        "/v1/views/{name}/statistics",
        "/v1/views/{name}/changes",
        "/metrics",
    ):
        assert path in service["paths"], path
    agent = json.loads((ROOT / "openapi" / "agent.json").read_text())
    for path in ("/health", "/v1/schema", "/v1/extract", "/v1/fetch"):
        assert path in agent["paths"], path
