"""`python -m inferstack rollback --env ENV [--to RELEASE] [--apply]`: pin an environment to an earlier release.

The release it ran before, from the pin history promote and rollback keep (inferstack/config/pin_history.py). Dry run by
default: prints, per image unit, the digest the pin holds now and the one it would hold, who wrote the target
entry, when and at which commit, and checks that every target image is still in the environment's registry.
`--apply` writes the pin file (as promote writes it) and appends a history entry; the deploy that follows is an
ordinary deploy.

Which release (`--to`):
- none: the release the environment ran before the current one. The current one is the newest history entry,
  which must match the pin file. A rollback entry stands for the entry it restored, so a second rollback goes
  one release further back instead of returning to the release just rolled back from; entries with the same
  images as the current pin are skipped.
- a history index: entry N is line N of the history file, from 1 (oldest); -1 is the newest, -2 the one
  before. An index has at most 6 digits.
- a release commit: the full commit or a unique prefix of at least 7 hex digits (the newest entry with it).

Exit 2: unknown environment, a corrupt history file, a --to that names nothing or is ambiguous. Exit 1: no
history, no earlier release, a pin file that differs from the history (without --to), a release that no longer
fits the config, an image gone from the registry. Nothing is written in either case."""

from __future__ import annotations

import argparse
import re
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING

from inferstack import atomic_write
from inferstack.aws import aws_sessions, ecr_images
from inferstack.command_line import DEFAULT_CONFIG_DIR, Failure, UsageError
from inferstack.config import loader, pin_history, release_pin
from inferstack.config.pin_history import HistoryEntry
from inferstack.config.release_pin import PinnedImage, ReleasePin

if TYPE_CHECKING:
    import boto3

INDEX_PATTERN = re.compile(r"^[+-]?\d{1,6}$")
COMMIT_PREFIX_PATTERN = re.compile(r"^[0-9a-fA-F]{7,64}$")
GONE = "gone from the registry"


class RollbackError(Failure):
    """The rollback cannot be done as asked (no history, an image gone); exit 1."""


def short(digest: str) -> str:
    return digest[: len("sha256:") + 12]


def describe(number: int, entry: HistoryEntry) -> str:
    """One line: the entry's release, who wrote it, when, and the commit the tool ran at."""
    release = entry.pin.release
    what = f"release {release.commit[:12]}" if release.commit else "no release manifest"
    if release.config_sha256:
        what += f" (config sha256 {release.config_sha256[:12]})"
    at = entry.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    tool = (
        f"tool at commit {entry.repository_commit[:12]}" if entry.repository_commit else "tool outside a git repository"
    )
    return f"entry {number} ({entry.describe_action()}): {what}; by {entry.by} at {at}; {tool}"


def lineage(entries: list[HistoryEntry], number: int) -> int:
    """The entry a rollback entry restored, followed back to a promote entry (`number` itself for one)."""
    while (restored := entries[number - 1].rolled_back_to) is not None:
        number = restored
    return number


def previous(entries: list[HistoryEntry]) -> int | None:
    """The release the environment ran before the newest entry's (see the module's doc), or None."""
    current = entries[-1].pin
    for number in range(lineage(entries, len(entries)) - 1, 0, -1):
        if not pin_history.same_images(entries[number - 1].pin, current):
            return number
    return None


def resolve_to(text: str, entries: list[HistoryEntry], history: Path) -> int:
    """The entry number `--to` names."""
    count = len(entries)
    if INDEX_PATTERN.fullmatch(text):
        index = int(text)
        if index == 0 or abs(index) > count:
            raise UsageError(
                f"--to {text}: {history} has {count} entries: 1 (oldest) to {count}, or -1 (newest) to -{count}"
            )
        return index if index > 0 else count + 1 + index
    if not COMMIT_PREFIX_PATTERN.fullmatch(text):
        raise UsageError(
            f"--to {text!r}: expected a history index (1, 2, ... or -1 for the newest, -2, "
            f"...) or a release commit (at least 7 hex digits)"
        )
    prefix = text.lower()
    commits = {e.pin.release.commit.lower() for e in entries if e.pin.release.commit}
    matches = sorted(c for c in commits if c.startswith(prefix))
    if not matches:
        known = ", ".join(sorted(c[:12] for c in commits)) or "none (promoted without --manifest)"
        raise UsageError(f"--to {text}: no entry of {history} pins a release with that commit; releases there: {known}")
    if len(matches) > 1:
        raise UsageError(
            f"--to {text}: ambiguous, {len(matches)} releases in {history} start with it: "
            f"{', '.join(c[:12] for c in matches)}; give more digits"
        )
    return max(
        n for n, e in enumerate(entries, start=1) if e.pin.release.commit and e.pin.release.commit.lower() == matches[0]
    )


def missing_images(session: boto3.Session, pin: ReleasePin) -> dict[str, PinnedImage]:
    """The pinned images (by unit) that ECR no longer holds: DescribeImages by digest in each image's
    registry. Other ECR errors (access denied, throttling) propagate."""
    clients = {}
    gone = {}
    for unit, image in sorted(pin.images.items()):
        if image.region not in clients:
            clients[image.region] = session.client("ecr", region_name=image.region)
        try:
            ecr_images.resolve(clients[image.region], ecr_images.ImageRef.parse(image.uri))
        except ecr_images.ImageError:
            gone[unit] = image
    return gone


def changes(current: ReleasePin | None, target: ReleasePin, gone: dict[str, PinnedImage]) -> list[str]:
    """One line per image unit: `unit: <now> -> <target>`, or `unit: unchanged`."""
    now = current.images if current is not None else {}
    lines = []
    for unit in sorted(set(now) | set(target.images)):
        before, after = now.get(unit), target.images.get(unit)
        if after is None:
            line = f"{unit}: {short(before.digest) if before else 'not pinned'} -> not pinned"
        elif before is not None and (before.repository_uri, before.digest) == (after.repository_uri, after.digest):
            line = f"{unit}: unchanged"
        else:
            line = f"{unit}: {short(before.digest) if before else 'not pinned'} -> {short(after.digest)}"
        lines.append(line + (f" ({GONE})" if unit in gone else ""))
    return lines


def _gone_message(gone: dict[str, PinnedImage]) -> str:
    images = ", ".join(f"{unit} {image.uri}" for unit, image in sorted(gone.items()))
    return (
        f"image gone from the registry: {images}; it was deleted or expired by a lifecycle rule; pick another "
        f"release with --to"
    )


def _current(pin_path: Path) -> tuple[ReleasePin | None, str]:
    """The pin file and, when it cannot be read, why (one phrase)."""
    pin, problems = release_pin.read(pin_path)
    if pin is not None:
        return pin, ""
    if problems and problems[0][2].startswith("file not found"):
        return None, "the file does not exist"
    key, line, message = problems[0]
    return None, f"it cannot be read ({f'{key}: ' if key else ''}{message})"


def run(args: argparse.Namespace) -> int:
    project = loader.load(args.config_dir, releases=False)  # the pin is read here: rollback may fix a bad one
    env_name = args.env
    if env_name not in project.environments:
        raise UsageError(f"--env: unknown environment {env_name!r}; known: {', '.join(project.environments)}")
    environment = project.environments[env_name]
    pin_path = loader.pin_path(project.config_dir, environment) or project.config_dir / "releases" / f"{env_name}.json"
    history = pin_history.history_path(pin_path, env_name)
    try:
        entries = pin_history.read(history, env_name)
    except pin_history.HistoryError as exc:
        raise UsageError(str(exc)) from None
    if not entries:
        raise RollbackError(
            f"{history}: no pin history for {env_name}, so no release to roll back to "
            f"(`promote --apply` records each pin it writes there)"
        )
    current, unreadable = _current(pin_path)
    matching = [
        n for n, e in enumerate(entries, start=1) if current is not None and pin_history.same_images(e.pin, current)
    ]
    current_is_newest = bool(matching) and matching[-1] == len(entries)

    if args.to is not None:
        number = resolve_to(args.to, entries, history)
    elif not current_is_newest:
        reason = unreadable or (
            f"it pins the images of entry {matching[-1]}" if matching else "its images are in no history entry"
        )
        raise RollbackError(
            f"{pin_path} does not match the newest entry ({len(entries)}) of {history}: {reason}; "
            f"it was written by other means than promote or rollback; name the release to pin "
            f"with --to"
        )
    else:
        found = previous(entries)
        if found is None:
            raise RollbackError(
                f"{history}: no release of {env_name} before the current one "
                f"({describe(len(entries), entries[-1])}); name one with --to"
            )
        number = found
    target = entries[number - 1]

    findings = list(
        release_pin.check(target.pin, env_name, environment, [u.name for u in project.image_units(env_name)])
    )
    if findings:
        raise RollbackError(
            f"entry {number} of {history} does not fit {env_name}'s config now: "
            f"{'; '.join(f'{key}: {message}' for key, message in findings)}; "
            f"pick another release with --to"
        )

    session = aws_sessions.session_for(env_name, environment, purpose="rollback")
    gone = missing_images(session, target.pin)

    mode = "applying" if args.apply else f"dry run; --apply writes {pin_path}"
    print(f"rollback {env_name} to entry {number} of {history} ({mode})")
    if current is None:
        print(f"now:    {pin_path}: {unreadable}")
    elif matching:
        print(f"now:    {describe(matching[-1], entries[matching[-1] - 1])}")
    else:
        print(f"now:    {pin_path}: images in no history entry")
    print(f"target: {describe(number, target)}")
    for line in changes(current, target.pin, gone):
        print(line)
    if gone:
        raise RollbackError(_gone_message(gone))
    registries = sorted({f"{i.account}/{i.region}" for i in target.pin.images.values()})
    print(f"registry: all {len(target.pin.images)} target images present in {', '.join(registries)}")
    if current is not None and pin_history.same_images(current, target.pin):
        print(f"nothing to do: {pin_path} already pins these images")
        return 0
    config_dir = "" if args.config_dir == DEFAULT_CONFIG_DIR else f" --config-dir {args.config_dir}"
    if not args.apply:
        print(f"to apply: python -m inferstack rollback --env {env_name} --to {number} --apply{config_dir}")
        return 0

    try:
        pin_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write.write_text(pin_path, release_pin.dump(target.pin))
    except OSError as exc:
        raise RollbackError(f"{pin_path}: cannot write: {exc.strerror or exc}") from None
    print(f"wrote {pin_path}")
    entry = pin_history.new_entry(target.pin, cwd=project.config_dir, rolled_back_to=number)
    try:
        appended = pin_history.append(history, entry)
    except pin_history.HistoryError as exc:
        raise RollbackError(f"{exc} (the pin was written; the history does not record it)") from None
    print(f"recorded entry {appended} in {history}")
    if environment.release is None:
        print(loader.not_deployed_note(project.config_dir, env_name, pin_path))
    print(
        f"next: commit {pin_path} and {history}, deploy as usual (cdk deploy '{env_name}/*'), then "
        f"python -m inferstack smoke --env {env_name}"
    )
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "rollback",
        help="pin an environment back to a release it ran before",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
    )
    cmd.add_argument("--env", required=True, metavar="ENV", help="environment to pin back")
    cmd.add_argument(
        "--to",
        metavar="RELEASE",
        help="history index (1 = oldest entry, -1 = newest, -2 = the one before) or release commit "
        "(7+ hex digits); default: the release the environment ran before the current one",
    )
    cmd.add_argument("--apply", action="store_true", help="write the pin and record it (default: dry run)")
    cmd.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    cmd.set_defaults(func=run)
