"""The built site opened in a real headless browser (Debian's chromium through Selenium,
tests/support/browser_check.py): the home page renders with its header and navigation, the navigation leads to
a generated reference page that renders with its own table of contents and examples, the architecture
diagram is drawn with labels a reader can read at 1400 px, code blocks wrap instead of hiding their ends behind
a scroll bar, and the search box finds pages, served and opened from disk, offline."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import subprocess

import pytest

from tests.support.docs_site import BROWSER_CHECK, DOCS_VENV, require_docs_venv
from tests.support.paths import ROOT
from tests.support.threaded_server import serving

pytestmark = pytest.mark.docs
CHECK_TIMEOUT_S = 180


@pytest.fixture
def served(built_site):
    """The built site over HTTP on a loopback port of its own, as `mkdocs serve` would show it."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(built_site))
    handler.log_message = lambda *args: None
    with serving(handler) as port:
        yield f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def browser_ready():
    require_docs_venv()
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing: run `make setup` (the browser target installs Debian's "
            f"chromium and chromium-driver)",
            pytrace=False,
        )


def test_home_and_a_reference_page_render_with_their_navigation(browser_ready, built_site, served):
    from_disk = (built_site / "index.html").as_uri()
    result = subprocess.run(
        [str(DOCS_VENV / "bin" / "python"), str(BROWSER_CHECK), served, from_disk],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout)

    home = seen["home"]
    assert home["title"] == "inferstack" and home["h1"] == "inferstack"
    assert home["header"] and home["sidebar_width"] > 150  # the navigation is on screen, not folded
    for section in (
        "Getting started",
        "How-to guides",
        "Reference",
        "Explanation",
        "Model file",
        "Roll back a release",
    ):
        assert section in home["nav"], section
    assert home["nav_active"] == ["Home"]
    assert home["toc"] == ["Two commands", "Find your way"]

    reference = seen["reference"]  # reached by clicking "Model file"
    assert reference["url"] == served + "reference/model-file.html"  # .html: the site opens from disk too
    assert reference["h1"] == "Model file reference"
    assert reference["sidebar_width"] > 150 and reference["nav_active"] == ["Model file"]
    assert reference["nav"] == home["nav"]
    for key in (
        "Keys of every kind",
        "capacity.min",
        "kind: neuron-ecs",
        "compile.neuron_generation",
        "kind: triton-sagemaker",
        "serving.backend",
    ):
        assert key in reference["toc"], key
    assert reference["code_blocks"] > 50  # the examples, highlighted

    diagram = seen["diagram"]  # mermaid ran, from the site's own copy
    assert diagram["svg"] and diagram["nodes"] >= 10 and diagram["height"] > 100
    assert "one InferenceStage per environment" in diagram["text"]
    # Drawn left to right it was scaled down to 5 px text to fit the column at 1400 px; top to bottom, 11.8 px.
    assert diagram["label_px"] >= 11

    # The home page's two commands and the retire runbook's validate error are wider than the column.
    for page in (home, reference, seen["wide_code"]):
        assert page["code_blocks"] and page["code_overflowing"] == 0, page["url"]

    # Served, and opened from disk (file://, where a page may not start the search's web worker): both find
    # the pages that mention a rollback, instead of staying on "Initializing search".
    for where in ("search", "search_from_disk"):
        search = seen[where]
        assert search["meta"].endswith("matching documents"), (where, search["meta"])
        assert "Roll back a release" in search["results"], (where, search["results"])
