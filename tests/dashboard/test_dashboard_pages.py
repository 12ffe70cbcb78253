"""The dashboard's files as the server sends them (no browser): pages, headers, the fixed set of assets."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urljoin

import pytest
from fastapi.testclient import TestClient

from spotrun.server.app import create_app
from spotrun.server.dashboard.router import STATIC_DIR
from spotrun.state import Store


@pytest.fixture
def client(sqlite_url: str) -> Iterator[TestClient]:
    store = Store(sqlite_url)
    yield TestClient(create_app(store))
    store.dispose()


@pytest.mark.parametrize(("path", "page"), [
    ("/dashboard/", "jobs.html"), ("/dashboard/login", "login.html"), ("/dashboard/jobs/7", "job.html"),
])
def test_pages_are_served_with_a_strict_content_policy(client: TestClient, path: str, page: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.text == (STATIC_DIR / page).read_text()
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert response.headers["referrer-policy"] == "no-referrer"


def test_the_root_leads_to_the_job_list(client: TestClient) -> None:
    for path in ("/", "/dashboard"):
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 307 and response.headers["location"] == "dashboard/"  # relative
        assert urljoin(f"http://testserver{path}", response.headers["location"]) == "http://testserver/dashboard/"


def test_no_page_or_script_names_an_absolute_path() -> None:
    """Behind a proxy serving spotrun under a path prefix an absolute path would miss it (the Chromium test serves
    the dashboard under one)."""
    absolute = re.compile(r'(?:href|src)="/|["`\'](?:/dashboard|/api)')
    for path in STATIC_DIR.iterdir():
        if path.suffix in (".html", ".js"):
            lines = [line for line in path.read_text().splitlines() if not line.startswith("const MARK = ")]
            assert not [line for line in lines if absolute.search(line)], path.name
    assert 'const MARK = "/dashboard/";' in (STATIC_DIR / "api.js").read_text()  # the one left out, the pages' mark


def test_only_the_dashboards_own_files_are_served(client: TestClient) -> None:
    assert client.get("/dashboard/static/api.js").headers["content-type"] == "text/javascript; charset=utf-8"
    assert client.get("/dashboard/static/style.css").headers["content-type"] == "text/css; charset=utf-8"
    for name in ("router.py", "..%2Frouter.py", "missing.js", "%2E%2E%2F%2E%2E%2Fapp.py"):
        assert client.get(f"/dashboard/static/{name}").status_code == 404, name
    assert client.get("/dashboard/jobs/0").status_code == 422


def test_every_script_and_stylesheet_a_page_loads_exists(client: TestClient) -> None:
    """A renamed file would leave a page blank; the browser test covers the pages, this covers every import."""
    sources = [path for path in STATIC_DIR.iterdir() if path.suffix in (".html", ".js")]
    page_links = r'(?:src|href)="(?:\.\./)?static/([^"]+)"'
    module_imports = r'from "\./([^"]+)"'
    referenced = {
        name for path in sources for pattern in (page_links, module_imports)
        for name in re.findall(pattern, path.read_text())
    }
    assert {"api.js", "style.css", "timeline.js", "log-view.js"} <= referenced
    for name in referenced:
        assert client.get(f"/dashboard/static/{name}").status_code == 200, name


def test_no_page_puts_the_token_in_a_url_or_inline_script() -> None:
    for path in STATIC_DIR.glob("*.html"):
        text = path.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)", text), f"{path.name} has an inline script"
        assert not re.search(r"\son[a-z]+=", text), f"{path.name} has an inline event handler"
    for path in STATIC_DIR.glob("*.js"):
        assert not re.search(r"[?&]token=", path.read_text()), f"{path.name} puts a token in a query string"
