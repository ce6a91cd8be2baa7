"""Property-based fuzzing of the config loader: whatever the files hold, `config.load` either returns a
project or raises ConfigError whose problems are one line each naming their file, in bounded time; and
`python -m inferstack validate` exits 0 or 2 without a traceback.

The documents start from the shipped configs, with values swapped for random types, huge and tiny
numbers, nan/inf spellings, deep nesting, unknown keys and aliases; others are raw YAML text (alias
bombs, unbalanced brackets, tags) and raw bytes. Derandomized (tests/conftest.py): CI runs the same
examples every time."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from inferstack import config
from tests.support.fuzz import fuzz_examples, mutate_once
from tests.support.hang_guard import hang_guard
from tests.support.paths import CONFIG_DIR

pytestmark = pytest.mark.fuzz

SHIPPED = {path.name: yaml.safe_load(path.read_text()) for path in sorted(CONFIG_DIR.glob("*.yaml"))}


@st.composite
def mutated_config(draw) -> tuple[str, str]:
    """(file name, YAML text): a shipped file with a few values replaced, deleted or added."""
    name = draw(st.sampled_from(sorted(SHIPPED)))
    data = yaml.safe_load(yaml.safe_dump(SHIPPED[name]))  # a deep copy
    for _ in range(draw(st.integers(1, 4))):
        mutate_once(draw, data, ["replace", "replace", "replace", "delete", "add", "nest"])
        if not data:
            break
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    if draw(st.booleans()):  # share one mapping through an anchor, as a careful author might
        text += draw(
            st.sampled_from(
                [
                    "x-shared: &shared {min: 1, max: 2}\nx-user: *shared\n",
                    "x-list: &l [1, 2, 3]\nx-more: [*l, *l, *l]\n",
                    "x-merge: &m {a: 1}\nx-into: {<<: *m, b: 2}\n",
                ]
            )
        )
    return name, text


@st.composite
def alias_bomb(draw) -> str:
    width, depth = draw(st.integers(2, 12)), draw(st.integers(2, 12))
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, depth)]
    return "\n".join(lines) + "\n"


yaml_text = st.one_of(
    alias_bomb(),
    st.integers(1, 3000).map(lambda n: "name: " + "[" * n + "]" * n + "\n"),
    st.integers(1, 3000).map(lambda n: "".join("  " * i + f"k{i}:\n" for i in range(n)) + "  " * n + "v\n"),
    st.text(alphabet="[]{}:-,&*!|>'\"#%@` \n\t.0123456789eEinfa<~?", max_size=80),
    st.lists(
        st.sampled_from(
            [
                "name: x\n",
                "kind: neuron-ecs\n",
                "a: &a [1]\n",
                "b: *a\n",
                "c: *zz\n",
                "!!python/object:os.system ls\n",
                "d: !!binary AAAA\n",
                "e: !!set {1, 2}\n",
                "--- \n",
                "f: 2024-13-45\n",
                "g: 1.0e400\n",
                "h: " + "9" * 5000 + "\n",
                "? [x]\n: y\n",
                "<<: *a\n",
                "i: &i {j: *i}\n",
                "\t- tab\n",
                "%YAML 1.1\n",
            ]
        ),
        max_size=6,
    ).map("".join),
)


def assert_loads_or_reports(config_dir: Path) -> None:
    try:
        with hang_guard("config.load of a generated config"):
            config.load(config_dir)
    except config.ConfigError as exc:
        assert exc.problems
        for problem in exc.problems:
            line = str(problem)
            assert len(line.splitlines()) == 1 and line.isprintable(), line
            assert len(line) < 2000, line
            assert problem.file.startswith(config_dir.name + "/"), line


def in_a_copy(files: dict[str, bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config_dir = Path(tmp) / "model_configs"
        shutil.copytree(CONFIG_DIR, config_dir)
        for name, content in files.items():
            (config_dir / name).write_bytes(content)
        assert_loads_or_reports(config_dir)


@pytest.fixture(scope="module", autouse=True)
def imports_done():
    config.load(CONFIG_DIR)  # the checks' imports, before any example runs under the hang guard


@settings(max_examples=fuzz_examples(80), deadline=None)
@given(mutated_config())
def test_mutated_shipped_configs_load_or_report(mutation):
    name, text = mutation
    in_a_copy({name: text.encode()})


@settings(max_examples=fuzz_examples(60), deadline=None)
@given(yaml_text, st.sampled_from(["intent-bert.yaml", "extra.yaml", "environments.yaml"]))
def test_raw_yaml_text_loads_or_reports(text, name):
    in_a_copy({name: text.encode("utf-8", errors="surrogatepass")})


@settings(max_examples=fuzz_examples(20), deadline=None)
@given(st.binary(max_size=200))
def test_raw_bytes_load_or_report(content):
    in_a_copy({"extra.yaml": content})


@settings(max_examples=fuzz_examples(3), deadline=None)
@given(mutated_config())
def test_validate_cli_exits_0_or_2_without_a_traceback(mutation):
    from tests.support.cli import run

    name, text = mutation
    with tempfile.TemporaryDirectory() as tmp:
        config_dir = Path(tmp) / "model_configs"
        shutil.copytree(CONFIG_DIR, config_dir)
        (config_dir / name).write_text(text)
        result = run("-m", "inferstack", "validate", "--config-dir", str(config_dir))
    assert result.returncode in (0, 2), result.stderr
    assert "Traceback" not in result.stderr
    if result.returncode == 2:
        *problems, summary = result.stderr.strip().splitlines()
        assert summary == f"{len(problems)} problem(s) found"
