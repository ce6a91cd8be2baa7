"""What the architecture page's layout says about files holds: it names every script in benchmarks/, and the
file it says switches off creation stack traces is the one that does."""

from __future__ import annotations

import re

from tests.support.paths import ROOT

ARCHITECTURE = ROOT / "docs" / "explanation" / "architecture.md"


def layout_entry(folder: str) -> str:
    """The layout block's entry for `folder`: its line and the indented lines that continue it."""
    layout = ARCHITECTURE.read_text().split("## Layout", 1)[1]
    match = re.search(rf"^{re.escape(folder)} .*?(?=^\S|^```)", layout, re.M | re.S)
    assert match, f"no {folder} in the layout"
    return match[0]


def test_the_layout_names_every_benchmark_script():
    entry = layout_entry("benchmarks/")
    scripts = sorted(path.stem for path in (ROOT / "benchmarks").glob("*.py"))
    assert len(scripts) > 10
    assert [name for name in scripts if not re.search(rf"\b{name}\b", entry)] == []


def test_the_layout_says_where_creation_stack_traces_are_switched_off():
    setting = "aws:cdk:disable-creation-stack-traces"
    assert setting in (ROOT / "stacks" / "app_builder.py").read_text()
    assert setting not in (ROOT / "app.py").read_text()
    assert "stacks/app_builder.py drops creation stack traces" in layout_entry("cdk.json")
