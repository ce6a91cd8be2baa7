"""MkDocs hook (mkdocs.yml `hooks:`): the site's vendored scripts must be there before a build, or its diagrams
would silently stay text and its search never start from disk. `make setup` fetches them (the Makefile's
.make/docs and SEARCH_SHIM targets)."""

from __future__ import annotations

from pathlib import Path

from mkdocs.exceptions import PluginError

VENDORED = ("assets/vendor/mermaid.min.js", "assets/vendor/iframe-worker-shim.js")


def on_config(config):
    missing = [name for name in VENDORED if not (Path(config["docs_dir"]) / name).is_file()]
    if missing:
        raise PluginError(f"docs/{missing[0]} is missing: run `make setup` (it fetches the pinned copy)")
    return config
