"""Snapshot form of an environment: all its templates, with content hashes of assets replaced so the
snapshot changes when infrastructure changes, not when an unrelated file in an asset directory does."""

from __future__ import annotations

import json
import re

_ASSET_HASH = re.compile(r"\b[0-9a-f]{64}\b")


def normalise(templates: dict[str, dict]) -> str:
    text = json.dumps(templates, indent=1, sort_keys=True)
    return _ASSET_HASH.sub("<asset-hash>", text) + "\n"
