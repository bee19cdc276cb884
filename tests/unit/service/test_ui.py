"""GET /ui: the dashboard's files, served without a key when the service has one (no Spark)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.app import create_app
from service.routes.ui import ASSETS, UI_DIR
from service.settings import ServiceSettings


def test_the_page_and_its_assets_are_served_without_the_key(tmp_path):
    app = create_app(ServiceSettings(data_dir=tmp_path, api_key="k3y"), start_spark=False)
    with TestClient(app) as client:
        page = client.get("/ui")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert page.text == (UI_DIR / "index.html").read_text()
        assert client.get("/ui/").text == page.text
        for asset in ASSETS:
            assert f"/ui/{asset}" in page.text
            r = client.get(f"/ui/{asset}")
            assert r.status_code == 200 and r.text == (UI_DIR / asset).read_text()
        # what the page reads and starts needs the key: the page asks for it on a 401
        assert client.get("/v1/views").status_code == 401
        assert client.get("/v1/views", headers={"X-API-Key": "k3y"}).status_code == 200
        assert client.post("/v1/views/x/syncs").status_code == 401
        assert client.get("/ui/secrets.txt").status_code == 404
        assert client.get("/ui/%2E%2E%2Fapp.py").status_code == 404


def test_the_assets_are_every_file_the_package_ships_for_the_page():
    assert sorted(p.name for p in UI_DIR.iterdir()) == sorted(["index.html", *ASSETS])
