"""Hostile config files: alias bombs, recursive aliases, deep nesting, oversized documents, numbers that
overflow or are not finite. Each is rejected quickly with one line naming file, line and key path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from inferstack import config
from inferstack.commands import plan_report
from inferstack.config import yaml_source
from tests.support.config_edits import edit_yaml, problems_of, set_at
from tests.support.hang_guard import hang_guard
from tests.support.paths import CONFIG_DIR

# Nine levels of nine aliases: 9**9 (387 million) leaves once expanded, from 700 bytes.
ALIAS_BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


@pytest.fixture(scope="module", autouse=True)
def imports_done():
    """The first load imports the checks' dependencies (seconds on a busy machine); time only the parse."""
    config.load(CONFIG_DIR)


def only_problem(config_dir: Path, filename: str) -> str:
    problems = problems_of(config_dir)
    assert all("\n" not in p for p in problems)
    mine = [p for p in problems if p.startswith(f"model_configs/{filename}")]
    assert len(mine) == 1, problems
    return mine[0]


def test_alias_bomb_is_rejected_at_the_node_limit(config_copy):
    (config_copy / "bomb.yaml").write_text(ALIAS_BOMB)
    with hang_guard("validate of an alias bomb"):
        problem = only_problem(config_copy, "bomb.yaml")
    assert problem == (
        "model_configs/bomb.yaml:5: e.0: alias *d (7381 nodes) takes the document past 10000 "
        "nodes (the limit; an alias counts every node it repeats)"
    )


def test_alias_bomb_parse_alone_stops_at_the_first_alias_past_the_limit(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    with hang_guard("parse of an alias bomb"), pytest.raises(yaml_source.YamlSyntaxError, match="past 10000 nodes"):
        yaml_source.parse(path)


def test_a_bomb_inside_a_real_config_names_the_key(config_copy):
    path = config_copy / "intent-bert.yaml"
    path.write_text(
        path.read_text()
        + "x0: &x0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
        + "".join(f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]\n" for i in range(1, 6))
    )
    problem = only_problem(config_copy, "intent-bert.yaml")
    assert ": x3.7: alias *x2 (1111 nodes) takes the document past 10000 nodes" in problem


def test_aliases_and_merge_keys_within_the_limits_still_load(config_copy):
    path = config_copy / "t5-spelling.yaml"
    data = yaml.safe_load(path.read_text())
    dev = data["environments"]["dev"]
    text = yaml.safe_dump({k: v for k, v in data.items() if k != "environments"}, sort_keys=False)
    text += (
        "environments:\n"
        f"  dev: &small\n    capacity: {json.dumps(dev['capacity'])}\n    slo: {json.dumps(dev['slo'])}\n"
        "  staging: {<<: *small}\n"
    )
    path.write_text(text)
    project = config.load(config_copy)
    model = project.model("t5-spelling")
    assert model.capacity_for("staging") == model.capacity_for("dev")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("name: &a [x, *a]\n", "model_configs/hostile.yaml:1: name.1: alias *a refers to a node that contains it"),
        ("name: &a {b: *a}\n", "model_configs/hostile.yaml:1: name.b: alias *a refers to a node that contains it"),
        ("name: " + "[" * 40 + "]" * 40 + "\n", "nested deeper than 32 levels (the limit)"),
        (
            "a: &a " + "[" * 20 + "1" + "]" * 20 + "\nb: " + "[" * 20 + "*a" + "]" * 20 + "\n",
            "model_configs/hostile.yaml:2: b" + ".0" * 20 + ": alias *a nests the document deeper "
            "than 32 levels (the limit)",
        ),
        (
            "name: " + "9" * 5000 + "\n",
            "model_configs/hostile.yaml:1: name: integer of 5000 characters is out of range",
        ),
        (
            "name: 0x" + "f" * 5000 + "\n",
            "model_configs/hostile.yaml:1: name: integer of 5002 characters is out of range",
        ),
        ("name: " + ":".join(["59"] * 15) + "\n", "model_configs/hostile.yaml:1: name: integer 59:59:59:59:59"),
        (
            "name: 9223372036854775808\n",
            "name: integer 9223372036854775808 is out of range (at most 9223372036854775807)",
        ),
        ("name: 2024-13-45\n", "model_configs/hostile.yaml:1: name: cannot read '2024-13-45': month must be in 1..12"),
        (
            "name: '" + "x" * yaml_source.MAX_DOCUMENT_BYTES + "'\n",
            "model_configs/hostile.yaml: file is larger than 262144 bytes (the limit for a config file)",
        ),
    ],
    ids=[
        "recursive list",
        "recursive mapping",
        "deep nesting",
        "deep through an alias",
        "huge decimal",
        "huge hex",
        "huge sexagesimal",
        "past 64 bits",
        "impossible date",
        "oversized file",
    ],
)
def test_hostile_yaml_is_one_line(config_copy, text, expected):
    (config_copy / "hostile.yaml").write_text(text)
    with hang_guard("validate of a hostile file"):
        problem = only_problem(config_copy, "hostile.yaml")
    assert expected in problem


# YAML strings pydantic reads as floats ("1e400": YAML 1.1 wants a dot for a float) and YAML floats.
NON_FINITE = ["1e400", "nan", "1.0e+400", "-.inf", ".nan"]


@pytest.mark.parametrize("spelling", NON_FINITE)
@pytest.mark.parametrize(
    "filename, path",
    [
        ("intent-bert.yaml", ("slo", "peak_tps")),
        ("intent-bert.yaml", ("slo", "p99_latency_ms")),
        ("intent-bert.yaml", ("throughput_profile", "inf1.6xlarge", "throughput_per_second")),
        ("intent-bert.yaml", ("environments", "dev", "slo", "peak_tps")),
        ("intent-bert.yaml", ("serving", "max_queue_delay_ms")),
        ("intent-bert.yaml", ("capacity", "safety_factor")),
        ("intent-bert.yaml", ("capacity", "min")),
        ("intent-bert.yaml", ("compile", "batch_size")),
        ("environments.yaml", ("environments", "dev", "defaults", "safety_factor")),
        ("environments.yaml", ("environments", "dev", "prices", "inf1.xlarge")),
    ],
    ids=lambda v: ".".join(v) if isinstance(v, tuple) else v,
)
def test_non_finite_numbers_are_rejected_everywhere(config_copy, spelling, filename, path):
    def set_zero(data):
        node = data
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = 0

    edit_yaml(config_copy / filename, set_zero)
    target = config_copy / filename
    target.write_text(target.read_text().replace(f"{path[-1]}: 0\n", f"{path[-1]}: {spelling}\n", 1))
    problem = only_problem(config_copy, filename)
    key = ".".join(path)
    assert f": {key}: " in problem, problem
    assert (
        "finite number" in problem or "valid integer" in problem or "valid number" in problem or "finite" in problem
    ), problem


def test_the_reported_overflow_file(config_copy):
    # The file: peak_tps 1e400 read as infinity ended in an OverflowError traceback.
    target = config_copy / "intent-bert.yaml"
    target.write_text(target.read_text().replace("peak_tps: 16000", "peak_tps: 1e400"))
    assert only_problem(config_copy, "intent-bert.yaml") == (
        "model_configs/intent-bert.yaml:27: slo.peak_tps: Input should be a finite number (got '1e400')"
    )


@pytest.mark.parametrize("throughput", ["5.0e-324", "1.0e-320"])
def test_a_finite_profile_no_finite_fleet_can_serve_is_a_problem(config_copy, throughput):
    # Finite but absurd: peak / (throughput x safety) overflows (or the product underflows to 0).
    target = config_copy / "intent-bert.yaml"
    target.write_text(target.read_text().replace("throughput_per_second: 4000", f"throughput_per_second: {throughput}"))
    problems = [p for p in problems_of(config_copy) if "intent-bert" in p]
    assert problems and all("needs more instances than can be counted" in p for p in problems)
    assert any(": environments.staging.capacity.max: peak 4000 TPS" in p for p in problems)
    assert any(": capacity.max: peak 16000 TPS" in p for p in problems)


def test_plan_compare_leaves_out_a_profile_no_fleet_can_serve(config_copy):
    target = config_copy / "intent-bert.yaml"
    target.write_text(
        target.read_text().replace(
            "  inf1.xlarge:\n",
            "  inf1.2xlarge:\n    throughput_per_second: 1.0e-320\n    p99_latency_ms: 8\n"
            "    source: typo\n  inf1.xlarge:\n",
            1,
        )
    )
    project = config.load(config_copy)
    (row,) = [r for r in plan_report.build(project, ["dev"], compare=True) if r.model == "intent-bert"]
    assert sorted(o.instance_type for o in row.compare) == ["inf1.6xlarge", "inf1.xlarge"]


def test_huge_but_valid_numbers_do_not_crash(config_copy):
    edit_yaml(config_copy / "intent-bert.yaml", set_at("slo", "peak_tps", value=1.0e308))
    problems = [p for p in problems_of(config_copy) if "intent-bert" in p]
    assert problems and all("capacity.max: peak 1e+308 TPS needs" in p for p in problems)


@pytest.mark.parametrize(
    "content, expected",
    [
        ("[" * 100_000, "not valid JSON: maximum recursion depth exceeded"),
        ('{"format": ' + "9" * 5000 + "}", "not valid JSON: Exceeds the limit (4300 digits)"),
        (" " * (1024 * 1024 + 1), "file is larger than 1048576 bytes (the limit for a pin file)"),
    ],
    ids=["deep", "huge integer", "oversized"],
)
def test_hostile_pin_files_are_one_line(config_copy, content, expected):
    edit_yaml(
        config_copy / "environments.yaml",
        set_at("environments", "staging", "release", value={"manifest": "releases/staging.json"}),
    )
    (config_copy / "releases").mkdir()
    (config_copy / "releases" / "staging.json").write_text(content)
    problems = problems_of(config_copy)
    assert all("\n" not in p for p in problems)
    assert any(
        p.startswith("model_configs/environments.yaml:") and "releases/staging.json: " + expected in p for p in problems
    ), problems


HOSTILE_FILES = {
    "bomb.yaml": (ALIAS_BOMB, "model_configs/bomb.yaml:5: e.0: alias *d (7381 nodes) takes the document past"),
    "recursive.yaml": ("name: &a [x, *a]\n", "model_configs/recursive.yaml:1: name.1: alias *a refers to"),
    "deep.yaml": ("name: " + "[" * 5000 + "]" * 5000 + "\n", "model_configs/deep.yaml:1: name"),
    "huge.yaml": ("name: " + "9" * 5000 + "\n", "model_configs/huge.yaml:1: name: integer of 5000 characters"),
    "binary.yaml": (bytes(range(256)).decode("latin-1"), "model_configs/binary.yaml: "),
}


def write_hostile_files(config_dir: Path) -> None:
    for name, (text, _) in HOSTILE_FILES.items():
        (config_dir / name).write_bytes(text.encode("latin-1") if name == "binary.yaml" else text.encode())
    target = config_dir / "intent-bert.yaml"
    target.write_text(target.read_text().replace("peak_tps: 16000", "peak_tps: 1e400"))


def assert_reported_cleanly(stderr: str) -> None:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    for _, expected in HOSTILE_FILES.values():
        assert sum(line.startswith(expected) for line in lines) == 1, (expected, lines)
    assert "model_configs/intent-bert.yaml:27: slo.peak_tps: Input should be a finite number (got '1e400')" in lines


def test_validate_reports_hostile_files_in_one_line_each(config_copy):
    from tests.support.cli import run

    write_hostile_files(config_copy)
    # run() gives up after 300 s (subprocess timeout): the bomb alone ran for minutes before.
    result = run("-m", "inferstack", "validate", "--config-dir", str(config_copy))
    assert result.returncode == 2
    assert_reported_cleanly(result.stderr)
    assert result.stderr.strip().splitlines()[-1] == f"{len(HOSTILE_FILES) + 1} problem(s) found"


def test_synth_reports_hostile_files_the_same_way_and_writes_nothing(config_copy, tmp_path):
    from tests.support.cli import assert_nothing_written, cdk_env, run

    write_hostile_files(config_copy)
    outdir = tmp_path / "cdk.out"
    result = run("app.py", env=cdk_env(outdir, **{"inferstack:config-dir": str(config_copy)}))
    assert result.returncode == 2
    assert_reported_cleanly(result.stderr)
    assert_nothing_written(outdir)


@pytest.mark.parametrize(
    "content, expected",
    [
        # Found by test_fuzz_config: the reader's error was raised before the try that reports YAML errors.
        (b"x: \x00\n", ":48: malformed YAML: character #x0000 is not allowed"),
        (b"\x1b[31m: red\n", ":48: malformed YAML: character #x001b is not allowed"),
        # Found by test_fuzz_config: a key holding a line break made the problem two lines.
        (b'"\\r": 1\n', ":48: \\r: unknown key"),
        (b'"a\\u2028b": 1\n', ":48: a\\u2028b: unknown key"),
    ],
    ids=["NUL", "ESC", "CR in a key", "line separator in a key"],
)
def test_control_characters_stay_on_one_line(config_copy, content, expected):
    path = config_copy / "intent-bert.yaml"
    assert len(path.read_text().splitlines()) == 47
    path.write_bytes(path.read_bytes() + content)
    problem = only_problem(config_copy, "intent-bert.yaml")
    assert problem.isprintable() and problem == "model_configs/intent-bert.yaml" + expected
