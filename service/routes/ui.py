"""GET /ui: the dashboard, a static page (service/ui/) that reads the REST API from the browser.

Open even when the service has keys (auth.py): the page asks for a key when the API
answers 401 and keeps it in the tab's sessionStorage. The page needs no build step and loads nothing from
elsewhere: its script draws the plots itself (inline SVG), so it works offline.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from service.errors import NotFound

router = APIRouter(tags=["ui"])

UI_DIR = Path(__file__).resolve().parents[1] / "ui"
#: The page's assets by name, with their media types: nothing else under /ui/ is served.
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
#: The page and its assets change with the installed version, not per request.
NO_CACHE = {"Cache-Control": "no-cache"}


@router.get(
    "/ui",
    operation_id="dashboard",
    response_class=FileResponse,
    responses={200: {"content": {"text/html": {"schema": {"type": "string"}}}, "description": "the dashboard page"}},
)
def dashboard() -> FileResponse:
    """The dashboard (HTML): sources, views, their syncs' bytes, times and rows, the update
    statistics and a running sync's progress, read from this API by the browser."""
    return FileResponse(UI_DIR / "index.html", media_type="text/html; charset=utf-8", headers=NO_CACHE)


@router.get("/ui/", include_in_schema=False)
def dashboard_slash() -> FileResponse:
    return dashboard()


@router.get("/ui/{asset}", include_in_schema=False)
def dashboard_asset(asset: str) -> FileResponse:
    media_type = ASSETS.get(asset)
    if media_type is None:
        raise NotFound(f"no dashboard asset {asset!r}; the dashboard is at /ui")
    return FileResponse(UI_DIR / asset, media_type=media_type, headers=NO_CACHE)
