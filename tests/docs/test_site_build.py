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
    for page in ["index.html", "getting-started/concepts/index.html", "how-to/roll-back/index.html",
                 "how-to/retire-a-model/index.html", "reference/model-file/index.html", "reference/cli/index.html",
                 "explanation/architecture/index.html", "explanation/neuron-image/index.html"]:
        assert (built_site / page).is_file(), page
    assert (built_site / "assets" / "vendor" / "mermaid.min.js").is_file()


def test_the_api_page_is_rendered_from_the_docstrings(built_site):
    html = (built_site / "reference" / "constructs" / "index.html").read_text()
    assert "::: inferstack" not in html
    # NeuronEcsService's class docstring, and the signature mkdocstrings renders for it
    assert 'id="inferstack.constructs.neuron_service.service.NeuronEcsService"' in html
    assert "ECS-optimized AL2023 Neuron AMI" in html


def test_the_image_readmes_are_pages_of_the_site(built_site):
    html = (built_site / "explanation" / "neuron-image" / "index.html").read_text()
    assert "Build-arg contract" in html and "--8&lt;--" not in html and '--8<--' not in html


def _copy_of_the_docs(tmp_path: Path) -> Path:
    """A checkout holding what the build reads, docs/ copied (to break it), the rest linked."""
    for name in ("mkdocs.yml", "inferstack", "container"):
        (tmp_path / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path / "mkdocs.yml"


@pytest.mark.parametrize("link, complaint", [
    ("[a page that is not there](no-such-page.md)", "no-such-page.md"),
    ("[an anchor that is not there](concepts.md#no-such-section)", "does not contain an anchor '#no-such-section'"),
])
def test_a_broken_link_fails_the_strict_build(tmp_path, link, complaint):
    config = _copy_of_the_docs(tmp_path)
    page = tmp_path / "docs" / "getting-started" / "two-commands.md"
    page.write_text(page.read_text() + f"\n{link}\n")
    result = mkdocs_build(config, tmp_path / "site")
    assert result.returncode != 0
    assert complaint in result.stderr + result.stdout
