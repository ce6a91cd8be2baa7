"""`rollback` on moto, and the pin history it reads (inferstack/config/pin_history.py): staging ran release A,
then B (or A, B, C), each image unit's image in staging's own `inferstack/<unit>` repository, reached through
staging's deploy role. The dry run prints per unit what changes and who wrote the target, and writes nothing;
--apply writes the pin promote would have written and records the rollback; a second rollback goes further
back; --to takes an index or a commit; an image gone from the registry, a bad --to, a corrupt or missing
history refuse with one line and write nothing. promote --apply records what it pins."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from inferstack import cli
from inferstack.config import load, pin_history, release_pin
from inferstack.config.pin_history import HISTORY_FORMAT, HistoryEntry, HistoryError
from inferstack.config.release_pin import PIN_FORMAT, PinnedImage, ReleaseIdentity, ReleasePin
from tests.support import aws_fakes
from tests.support.cli import run
from tests.support.promote import MODELS, promote_cli, release_manifest

REGISTRY = "222222222222.dkr.ecr.us-east-1.amazonaws.com"
COMMITS = {"A": "a" * 40, "B": "b" * 40, "C": "c" * 40}
TOOL_COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def git_identity(tmp_path, monkeypatch):
    """Who the tool says wrote an entry: git's user.email from a config of the test's own."""
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n\temail = tester@example.com\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # the config copy is in no repository


def push_release(release: str) -> dict[str, aws_fakes.PushedImage]:
    """Release `release`'s image of every unit, in staging's promotion repositories."""
    sess = aws_fakes.session("staging")
    return {unit: aws_fakes.push_image(sess, f"inferstack/{unit}", seed=f"{unit}@{release}") for unit in MODELS}


def pin_of(release: str, images: dict[str, aws_fakes.PushedImage]) -> ReleasePin:
    """The pin promote writes for `release` (with a manifest)."""
    return ReleasePin(
        format=PIN_FORMAT,
        environment="staging",
        promoted_from="dev",
        release=ReleaseIdentity(commit=COMMITS[release], config_sha256=release.lower() * 64),
        images={
            u: PinnedImage(repository_uri=f"{REGISTRY}/inferstack/{u}", digest=i.digest, tag=i.tag)
            for u, i in images.items()
        },
    )


def entry_for(pin: ReleasePin, day: int, by: str = "alice@example.com") -> HistoryEntry:
    return HistoryEntry(
        format=HISTORY_FORMAT,
        environment="staging",
        action="promote",
        promoted_from="dev",
        at=datetime(2025, 3, day, 9, 30, tzinfo=UTC),
        by=by,
        repository_commit=TOOL_COMMIT,
        pin=pin,
    )


class Staging:
    def __init__(self, config_dir: Path, releases: str):
        self.config_dir = config_dir
        self.pin_path = config_dir / "releases" / "staging.json"
        self.history = config_dir / "releases" / "history" / "staging.jsonl"
        self.images = {r: push_release(r) for r in releases}
        self.pins = {r: pin_of(r, self.images[r]) for r in releases}
        self.pin_path.parent.mkdir()
        for day, r in enumerate(releases, start=1):
            pin_history.append(self.history, entry_for(self.pins[r], day))
            self.pin_path.write_text(release_pin.dump(self.pins[r]))
        env_file = config_dir / "environments.yaml"
        env_file.write_text(
            env_file.read_text().replace(
                "  staging:\n", "  staging:\n    release: {manifest: releases/staging.json}\n", 1
            )
        )

    def files(self) -> tuple[bytes, bytes]:
        return self.pin_path.read_bytes(), self.history.read_bytes()

    def entries(self) -> list[HistoryEntry]:
        return pin_history.read(self.history, "staging")


@pytest.fixture
def staging(aws, config_copy, git_identity):
    """staging ran release A, then B (its pin now)."""
    aws_fakes.with_deploy_roles(config_copy)
    return Staging(config_copy, "AB")


@pytest.fixture
def staging3(aws, config_copy, git_identity):
    """staging ran A, B, then C."""
    aws_fakes.with_deploy_roles(config_copy)
    return Staging(config_copy, "ABC")


def rollback_cli(capsys, config_dir, *args: str) -> tuple[int, list[str], list[str]]:
    code = cli.main(["rollback", "--env", "staging", "--config-dir", str(config_dir), *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def short(digest: str) -> str:
    return digest[:19]


def test_dry_run_prints_each_unit_and_the_target_entry_and_writes_nothing(staging, capsys):
    before = staging.files()
    code, out, err = rollback_cli(capsys, staging.config_dir)
    assert code == 0, err
    a, b = staging.images["A"], staging.images["B"]
    config = staging.config_dir
    assert out == [
        f"rollback staging to entry 1 of {staging.history} (dry run; --apply writes {staging.pin_path})",
        f"now:    entry 2 (promote from dev): release {'b' * 12} (config sha256 {'b' * 12}); by alice@example.com "
        f"at 2025-03-02T09:30:00Z; tool at commit 0123456789ab",
        f"target: entry 1 (promote from dev): release {'a' * 12} (config sha256 {'a' * 12}); by alice@example.com "
        f"at 2025-03-01T09:30:00Z; tool at commit 0123456789ab",
        *[f"{u}: {short(b[u].digest)} -> {short(a[u].digest)}" for u in sorted(MODELS)],
        "registry: all 4 target images present in 222222222222/us-east-1",
        f"to apply: python -m inferstack rollback --env staging --to 1 --apply --config-dir {config}",
    ]
    assert staging.files() == before


def test_apply_writes_the_pin_promote_wrote_and_records_the_rollback(staging, capsys):
    code, out, err = rollback_cli(capsys, staging.config_dir, "--apply")
    assert code == 0, err
    assert out[0].endswith("(applying)")
    assert out[-3:] == [
        f"wrote {staging.pin_path}",
        f"recorded entry 3 in {staging.history}",
        f"next: commit {staging.pin_path} and {staging.history}, deploy as usual (cdk deploy 'staging/*'), then "
        f"python -m inferstack smoke --env staging",
    ]
    assert staging.pin_path.read_text() == release_pin.dump(staging.pins["A"])
    *_, entry = staging.entries()
    assert (entry.action, entry.rolled_back_to, entry.promoted_from) == ("rollback", 1, None)
    assert entry.pin == staging.pins["A"]
    assert entry.by == "tester@example.com" and entry.repository_commit is None
    assert entry.at.utcoffset().total_seconds() == 0
    line = staging.history.read_text().splitlines()[2]
    assert json.loads(line)["at"].endswith("Z") and list(json.loads(line)) == sorted(json.loads(line))
    # The ordinary deploy reads it: the config loads with A's digests.
    assert load(staging.config_dir).releases["staging"] == staging.pins["A"]


def test_a_second_rollback_goes_further_back_and_then_refuses(staging3, capsys):
    s = staging3
    assert rollback_cli(capsys, s.config_dir, "--apply")[0] == 0
    assert s.pin_path.read_text() == release_pin.dump(s.pins["B"])
    # Not forth to C, which was just rolled back from: entry 4 stands for entry 2, so before it is A.
    code, out, err = rollback_cli(capsys, s.config_dir, "--apply")
    assert code == 0, err
    assert out[0].startswith("rollback staging to entry 1 of ")
    assert s.pin_path.read_text() == release_pin.dump(s.pins["A"])
    assert [(e.action, e.rolled_back_to) for e in s.entries()] == [
        ("promote", None),
        ("promote", None),
        ("promote", None),
        ("rollback", 2),
        ("rollback", 1),
    ]
    before = s.files()
    code, out, err = rollback_cli(capsys, s.config_dir, "--apply")
    assert code == 1 and out == []
    assert err == [
        f"rollback: error: {s.history}: no release of staging before the current one (entry 5 "
        f"(rollback to entry 1): release {'a' * 12} (config sha256 {'a' * 12}); by tester@example.com at "
        f"{s.entries()[-1].at.strftime('%Y-%m-%dT%H:%M:%SZ')}; tool outside a git repository); "
        f"name one with --to"
    ]
    assert s.files() == before


def test_undo_a_rollback_with_to_the_newer_release(staging, capsys):
    assert rollback_cli(capsys, staging.config_dir, "--apply")[0] == 0
    code, out, err = rollback_cli(capsys, staging.config_dir, "--to", "bbbbbbb", "--apply")
    assert code == 0, err
    assert staging.pin_path.read_text() == release_pin.dump(staging.pins["B"])
    assert staging.entries()[-1].rolled_back_to == 2


@pytest.mark.parametrize(
    "to, number",
    [("1", 1), ("2", 2), ("3", 3), ("-1", 3), ("-3", 1), ("+2", 2), ("aaaaaaa", 1), ("A" * 40, 1), ("ccccccccccc", 3)],
)
def test_to_takes_an_index_or_a_commit(staging3, capsys, to, number):
    code, out, err = rollback_cli(capsys, staging3.config_dir, "--to", to)
    assert code == 0, err
    assert out[0].startswith(f"rollback staging to entry {number} of ")
    if number == 3:  # the current pin
        assert out[-1] == f"nothing to do: {staging3.pin_path} already pins these images"
        assert all(line.endswith(": unchanged") for line in out[3 : 3 + len(MODELS)])


def test_to_a_commit_of_several_entries_takes_the_newest(staging, capsys):
    assert rollback_cli(capsys, staging.config_dir, "--apply")[0] == 0  # entry 3 restores A
    code, out, _ = rollback_cli(capsys, staging.config_dir, "--to", "aaaaaaa")
    assert code == 0
    assert out[0].startswith("rollback staging to entry 3 of ")
    assert out[-1].startswith("nothing to do: ")


def test_an_image_gone_from_the_registry_refuses_naming_unit_repository_and_digest(staging, capsys):
    gone = staging.images["A"]["t5-spelling"]
    ecr = aws_fakes.session("staging").client("ecr")
    ecr.batch_delete_image(repositoryName="inferstack/t5-spelling", imageIds=[{"imageDigest": gone.digest}])
    before = staging.files()
    message = (
        f"rollback: error: image gone from the registry: t5-spelling {REGISTRY}/inferstack/t5-spelling@"
        f"{gone.digest}; it was deleted or expired by a lifecycle rule; pick another release with --to"
    )
    code, out, err = rollback_cli(capsys, staging.config_dir)
    assert (code, err) == (1, [message])
    assert out[-1] == (
        f"t5-spelling: {short(staging.images['B']['t5-spelling'].digest)} -> {short(gone.digest)} "
        f"(gone from the registry)"
    )
    assert not [line for line in out if line.startswith(("registry:", "to apply:"))]
    code, out, err = rollback_cli(capsys, staging.config_dir, "--apply")
    assert (code, err) == (1, [message])
    assert staging.files() == before


def test_a_deleted_repository_is_gone_too(staging, capsys):
    ecr = aws_fakes.session("staging").client("ecr")
    ecr.delete_repository(repositoryName="inferstack/intent-pack", force=True)
    code, _, err = rollback_cli(capsys, staging.config_dir, "--apply")
    assert code == 1
    assert err[0].startswith("rollback: error: image gone from the registry: intent-pack ")


def test_images_are_looked_up_in_the_environments_account_through_its_deploy_role(staging, capsys, monkeypatch):
    """Without the deploy role, the ambient (moto default) account holds none of staging's images."""
    env_file = staging.config_dir / "environments.yaml"
    env_file.write_text(
        env_file.read_text().replace(
            "deploy_role_arn: arn:aws:iam::222222222222:role/inferstack-deploy", "deploy_role_arn: null"
        )
    )
    code, _, err = rollback_cli(capsys, staging.config_dir)
    assert code == 1 and err[0].startswith("rollback: error: image gone from the registry: ")


def test_a_pin_that_differs_from_the_history_refuses_unless_to_names_the_release(staging, capsys):
    staging.pin_path.write_text(release_pin.dump(pin_of("C", push_release("C"))))
    before = staging.files()
    code, out, err = rollback_cli(capsys, staging.config_dir, "--apply")
    assert (code, out) == (1, [])
    assert err == [
        f"rollback: error: {staging.pin_path} does not match the newest entry (2) of {staging.history}: "
        f"its images are in no history entry; it was written by other means than promote or rollback; "
        f"name the release to pin with --to"
    ]
    assert staging.files() == before
    code, out, err = rollback_cli(capsys, staging.config_dir, "--to", "2", "--apply")
    assert code == 0, err
    assert out[1] == f"now:    {staging.pin_path}: images in no history entry"
    assert staging.pin_path.read_text() == release_pin.dump(staging.pins["B"])


def test_a_missing_pin_file_needs_to(staging, capsys):
    staging.pin_path.unlink()
    code, _, err = rollback_cli(capsys, staging.config_dir)
    assert code == 1 and ": the file does not exist; " in err[0]
    code, out, err = rollback_cli(capsys, staging.config_dir, "--to", "-1", "--apply")
    assert code == 0, err
    assert out[1] == f"now:    {staging.pin_path}: the file does not exist"
    assert f"{MODELS[0]}: not pinned -> " in out[3]
    assert staging.pin_path.read_text() == release_pin.dump(staging.pins["B"])


def test_a_release_that_no_longer_fits_the_config_refuses(staging, capsys):
    """A has no image for a unit the config has now (a model added since): its deploy could not load."""
    images = dict(staging.pins["A"].images)
    del images["t5-spelling"]
    old = staging.pins["A"].model_copy(update={"images": images})
    lines = staging.history.read_text().splitlines(keepends=True)
    staging.history.write_text(pin_history.dump_entry(entry_for(old, 1)) + lines[1])
    code, _, err = rollback_cli(capsys, staging.config_dir, "--apply")
    assert code == 1
    assert err == [
        f"rollback: error: entry 1 of {staging.history} does not fit staging's config now: images: no "
        f"pinned image for t5-spelling; promote again to cover every dedicated model and neuron-cores "
        f"fleet of staging; pick another release with --to"
    ]
    assert staging.pin_path.read_text() == release_pin.dump(staging.pins["B"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--to", "9"], "--to 9: {history} has 2 entries: 1 (oldest) to 2, or -1 (newest) to -2"),
        (["--to", "0"], "--to 0: {history} has 2 entries: 1 (oldest) to 2, or -1 (newest) to -2"),
        (["--to", "-3"], "--to -3: {history} has 2 entries: 1 (oldest) to 2, or -1 (newest) to -2"),
        (
            ["--to", "1234567"],
            "--to 1234567: no entry of {history} pins a release with that commit; releases there: "
            "aaaaaaaaaaaa, bbbbbbbbbbbb",
        ),
        (
            ["--to", "abc"],
            "--to 'abc': expected a history index (1, 2, ... or -1 for the newest, -2, ...) or a release "
            "commit (at least 7 hex digits)",
        ),
        (
            ["--to", "main"],
            "--to 'main': expected a history index (1, 2, ... or -1 for the newest, -2, ...) or a "
            "release commit (at least 7 hex digits)",
        ),
    ],
)
def test_a_to_that_names_nothing_is_a_usage_error(staging, capsys, args, message):
    before = staging.files()
    code, out, err = rollback_cli(capsys, staging.config_dir, *args, "--apply")
    assert (code, out) == (2, [])
    assert err == ["rollback: error: " + message.format(history=staging.history)]
    assert staging.files() == before


def test_an_ambiguous_commit_prefix_is_a_usage_error(aws, config_copy, git_identity, capsys):
    aws_fakes.with_deploy_roles(config_copy)
    COMMITS.update(D="abcdef1" + "0" * 33, E="abcdef1" + "1" * 33)
    try:
        s = Staging(config_copy, "DE")
    finally:
        del COMMITS["D"], COMMITS["E"]
    code, _, err = rollback_cli(capsys, s.config_dir, "--to", "abcdef1")
    assert code == 2
    assert err == [
        f"rollback: error: --to abcdef1: ambiguous, 2 releases in {s.history} start with it: "
        f"abcdef100000, abcdef111111; give more digits"
    ]
    code, out, _ = rollback_cli(capsys, s.config_dir, "--to", "abcdef10")
    assert code == 0 and out[0].startswith("rollback staging to entry 1 of ")


def test_no_history_fails(aws, config_copy, capsys):
    code, out, err = rollback_cli(capsys, config_copy)
    history = config_copy / "releases" / "history" / "staging.jsonl"
    assert (code, out) == (1, [])
    assert err == [
        f"rollback: error: {history}: no pin history for staging, so no release to roll back to "
        f"(`promote --apply` records each pin it writes there)"
    ]
    assert not (config_copy / "releases").exists()


def test_unknown_environment_is_a_usage_error(config_copy, capsys):
    assert cli.main(["rollback", "--env", "qa", "--config-dir", str(config_copy)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "rollback: error: --env: unknown environment 'qa'; known: dev, staging, prod"
    ]


def test_missing_env_is_a_usage_error_without_traceback():
    result = run("-m", "inferstack", "rollback", "--to", "-2")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "python -m inferstack rollback: error: the following arguments are required: --env"
    ]


def test_a_corrupt_history_line_is_a_usage_error_naming_file_line_and_key(staging, capsys):
    lines = staging.history.read_text().splitlines(keepends=True)
    data = json.loads(lines[1])
    data["pin"]["images"]["t5-spelling"]["digest"] = "sha256:nothex"
    staging.history.write_text(lines[0] + json.dumps(data) + "\n")
    before = staging.files()
    code, out, err = rollback_cli(capsys, staging.config_dir, "--apply")
    assert (code, out) == (2, [])
    assert err == [
        f"rollback: error: {staging.history}:2: pin.images.t5-spelling.digest: String should match "
        f"pattern '^sha256:[0-9a-f]{{64}}$'"
    ]
    assert staging.files() == before


# ---------------------------------------------------------------- the history file itself

GOOD = entry_for(
    pin_of(
        "A", {u: aws_fakes.PushedImage("", "t" * 64, "sha256:" + f"{n}" * 64) for n, u in enumerate(MODELS, start=1)}
    ),
    1,
)


def good_line(**changes) -> str:
    data = json.loads(pin_history.dump_entry(GOOD))
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    "text, line, key, message",
    [
        ("{not json\n", 1, "", "not valid JSON: Expecting property name enclosed in double quotes (column 2)"),
        (
            pin_history.dump_entry(GOOD) + "\n" + pin_history.dump_entry(GOOD),
            2,
            "",
            "empty line (each line is one entry: a JSON object)",
        ),
        ("[1, 2]\n", 1, "", "expected a JSON object"),
        (
            good_line(format="inferstack-pin/1"),
            1,
            "format",
            "not a pin history entry (format is not 'inferstack-pin-history/1')",
        ),
        (
            good_line(environment="prod"),
            1,
            "",
            "Value error, pin.environment is 'staging', the entry's environment 'prod'",
        ),
        (good_line(at=None), 1, "at", "required field is missing"),
        (good_line(at="2025-03-01T09:30:00"), 1, "at", "Input should have timezone info"),
        (good_line(by="a\u2028b"), 1, "by", "Value error, must be printable text on one line"),
        (
            good_line(action="rollback"),
            1,
            "",
            "Value error, a rollback entry names rolled_back_to (and no promoted_from)",
        ),
        (
            good_line(action="rollback", promoted_from=None, rolled_back_to=1),
            1,
            "rolled_back_to",
            "entry 1 is not an earlier entry",
        ),
        (good_line(extra=1), 1, "extra", "unknown key"),
        (good_line(repository_commit="HEAD"), 1, "repository_commit", "String should match pattern '^[0-9a-f]{7,64}$'"),
        (
            "[" * 100_000 + "\n",
            1,
            "",
            "not valid JSON: maximum recursion depth exceeded while decoding a JSON array from a unicode string",
        ),
    ],
)
def test_bad_history_lines_are_one_line_naming_file_line_and_key(tmp_path, text, line, key, message):
    path = tmp_path / "staging.jsonl"
    path.write_text(text if text.endswith("\n") else text + "\n")
    with pytest.raises(HistoryError) as caught:
        pin_history.read(path, "staging")
    assert str(caught.value) == f"{path}:{line}: {key}: {message}" if key else f"{path}:{line}: {message}"


def test_an_entry_of_another_environment_is_refused(tmp_path):
    path = tmp_path / "prod.jsonl"
    pin_history.append(tmp_path / "staging.jsonl", GOOD)
    path.write_bytes((tmp_path / "staging.jsonl").read_bytes())
    with pytest.raises(
        HistoryError,
        match=r"prod\.jsonl:1: environment: entry is for 'staging', but this is "
        r"the history of prod$",
    ):
        pin_history.read(path, "prod")


def test_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "staging.jsonl"
    path.write_bytes(pin_history.dump_entry(GOOD).encode() + b'{"by": "\xff"}\n')
    with pytest.raises(HistoryError, match=r"staging\.jsonl:2: not UTF-8 text$"):
        pin_history.read(path, "staging")


def test_append_keeps_every_earlier_byte_and_adds_one_line(tmp_path):
    path = tmp_path / "history" / "staging.jsonl"
    assert pin_history.read(path, "staging") == []
    assert pin_history.append(path, GOOD) == 1
    first = path.read_bytes()
    assert pin_history.append(path, GOOD) == 2
    assert path.read_bytes() == first * 2 and first.count(b"\n") == 1
    assert pin_history.read(path, "staging") == [GOOD, GOOD]
    assert not list(path.parent.glob(".*.tmp"))


def test_append_to_a_corrupt_history_changes_nothing(tmp_path):
    path = tmp_path / "staging.jsonl"
    path.write_text("garbage\n")
    with pytest.raises(HistoryError, match=r"staging\.jsonl:1: not valid JSON"):
        pin_history.append(path, GOOD)
    assert path.read_text() == "garbage\n"


def test_who_falls_back_to_user_without_a_git_email(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "none"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.setenv("USER", "ci-runner")
    assert pin_history.who(tmp_path) == "ci-runner"
    assert pin_history.repository_commit(tmp_path) is None


# ---------------------------------------------------------------- promote writes the history


def test_promote_apply_records_the_pin_once(dev, capsys, tmp_path, git_identity):
    config_dir, images = dev
    manifest = tmp_path / "release.json"
    manifest.write_text(json.dumps(release_manifest(images)))
    code, out, err = promote_cli(capsys, config_dir, "--manifest", str(manifest))  # a dry run records nothing
    assert code == 0, err
    history = config_dir / "releases" / "history" / "staging.jsonl"
    assert not history.exists()
    code, out, err = promote_cli(capsys, config_dir, "--apply", "--manifest", str(manifest))
    assert code == 0, err
    (entry,) = pin_history.read(history, "staging")
    assert (entry.action, entry.promoted_from, entry.by) == ("promote", "dev", "tester@example.com")
    assert entry.pin == ReleasePin.model_validate_json((config_dir / "releases" / "staging.json").read_text())
    assert entry.pin.release.commit == "c" * 40
    # An unchanged re-run rewrites the same pin and records nothing new.
    assert promote_cli(capsys, config_dir, "--apply", "--manifest", str(manifest))[0] == 0
    assert len(pin_history.read(history, "staging")) == 1
    # The only release so far: nothing to roll back to.
    code, _, err = rollback_cli(capsys, config_dir)
    assert code == 1 and err[0].startswith(f"rollback: error: {history}: no release of staging before the current")


def test_promote_refuses_a_corrupt_history_before_copying(dev, capsys):
    config_dir, _ = dev
    history = config_dir / "releases" / "history" / "staging.jsonl"
    history.parent.mkdir(parents=True)
    history.write_text("{}\n")
    code, out, err = promote_cli(capsys, config_dir, "--apply")
    assert (code, out) == (2, [])
    assert err == [
        f"promote: error: {history}:1: format: not a pin history entry (format is not 'inferstack-pin-history/1')"
    ]
    assert aws_fakes.session("staging").client("ecr").describe_repositories()["repositories"] == []
    assert not (config_dir / "releases" / "staging.json").exists()
