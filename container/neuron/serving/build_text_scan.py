"""Compile text_scan.c into the _text_scan extension module beside it, for the Python that runs this.

The images run it in their build (Dockerfile.inf1, Dockerfile.inf2: the DLCs bring a C compiler and
Python's headers), and `make setup` runs it for the checkout. A worker without the module still
answers every request, through the Python path only (ascii_wordpiece.AsciiWordPiece.scanner).

    python build_text_scan.py      # CC picks the compiler (default cc)
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "text_scan.c"


def target() -> Path:
    return HERE / f"_text_scan{sysconfig.get_config_var('EXT_SUFFIX')}"


def main() -> int:
    out = target()
    partial = out.with_name(out.name + ".partial")
    command = [
        os.environ.get("CC", "cc"),
        "-O2",
        "-shared",
        "-fPIC",
        "-Wall",
        "-Werror",
        f"-I{sysconfig.get_paths()['include']}",
        str(SOURCE),
        "-o",
        str(partial),
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        sys.stderr.write(result.stderr)
        print(f"{SOURCE}: the compiler failed (exit {result.returncode}): {' '.join(command)}", file=sys.stderr)
        return 1
    partial.replace(out)  # whole or not at all: a worker never imports a half-written module
    print(f"built {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
