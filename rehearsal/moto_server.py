"""`python -m rehearsal.moto_server --port N`: moto's server with the rehearsal's named
workarounds (moto_patches) applied in this process first. Binds 127.0.0.1 only."""

from __future__ import annotations

import argparse
import os
import sys

from rehearsal import moto_patches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--patch",
        action="append",
        choices=sorted(moto_patches.BY_NAME),
        help="apply only this patch (repeatable; default: every patch)",
    )
    parser.add_argument("--no-patches", action="store_true", help="plain moto (to show a defect)")
    args = parser.parse_args(argv)
    # The live-values patch sends its readers' calls back here.
    os.environ[moto_patches.EMULATOR_URL_ENV] = f"http://127.0.0.1:{args.port}"
    if not args.no_patches:
        moto_patches.apply_all(args.patch)
    from moto import server

    print(
        f"moto server: patches {'none' if args.no_patches else ', '.join(args.patch or moto_patches.BY_NAME)}",
        file=sys.stderr,
        flush=True,
    )
    server.main(["--host", "127.0.0.1", "--port", str(args.port)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
