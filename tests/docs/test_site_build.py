"""`mkdocs build --strict` builds the site from docs/ with every page in the nav, the generated reference and
the constructs' API rendered; and strict really is strict: a broken link or an unknown anchor fails it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.docs_site import mkdocs_build
from tests.support.paths import ROOT

pytestmark = pytest.mark.docs


def test_the_site_builds_strictly_with_every_page(built_site):
    # One .html file per page (no directory URLs): the site works opened from disk as well as served.
    for page in [
        "index.html",
        "getting-started/concepts.html",
        "how-to/roll-back.html",
        "how-to/retire-a-model.html",
        "reference/model-file.html",
        "reference/cli.html",
        "explanation/architecture.html",
        "explanation/neuron-image.html",
    ]:
        assert (built_site / page).is_file(), page
    assert (built_site / "assets" / "vendor" / "mermaid.min.js").is_file()
    # What the search needs without a server: the index as a script, and the web-worker shim, both local.
    assert (built_site / "search" / "search_index.js").read_text().startswith("var __index = ")
    assert (built_site / "assets" / "vendor" / "iframe-worker-shim.js").is_file()
    assert "unpkg.com" not in (built_site / "index.html").read_text()


def test_the_api_page_is_rendered_from_the_docstrings(built_site):
    html = (built_site / "reference" / "constructs.html").read_text()
    assert "::: inferstack" not in html
    # NeuronEcsService's class docstring, and the signature mkdocstrings renders for it
    assert 'id="inferstack.constructs.neuron_service.service.NeuronEcsService"' in html
    assert "ECS-optimized AL2023 Neuron AMI" in html
    # A construct's arguments, from its docstring's Args: each in the Parameters table with its default.
    triton = html.split('id="inferstack.constructs.triton_endpoint.TritonEndpoint"', 1)[1]
    parameters = triton.split("Parameters:", 1)[1].split("Attributes:", 1)[0]
    for argument in ("model", "off_hours", "log_group", "vpc_owner_account"):
        assert f"<code>{argument}</code>" in parameters, argument
    assert "Default: this stack's account." in parameters


def test_the_image_readmes_are_pages_of_the_site(built_site):
    html = (built_site / "explanation" / "neuron-image.html").read_text()
    assert "Build-arg contract" in html and "--8&lt;--" not in html and "--8<--" not in html


def _copy_of_the_docs(tmp_path: Path) -> Path:
    """A checkout holding what the build reads, docs/ copied (to break it), the rest linked."""
    for name in ("mkdocs.yml", "inferstack", "container"):
        (tmp_path / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path / "mkdocs.yml"


@pytest.mark.parametrize(
    "link, complaint",
    [
        ("[a page that is not there](no-such-page.md)", "no-such-page.md"),
        ("[an anchor that is not there](concepts.md#no-such-section)", "does not contain an anchor '#no-such-section'"),
    ],
)
def test_a_broken_link_fails_the_strict_build(tmp_path, link, complaint):
    config = _copy_of_the_docs(tmp_path)
    page = tmp_path / "docs" / "getting-started" / "two-commands.md"
    page.write_text(page.read_text() + f"\n{link}\n")
    result = mkdocs_build(config, tmp_path / "site")
    assert result.returncode != 0
    assert complaint in result.stderr + result.stdout
