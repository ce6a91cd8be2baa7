"""The image's HEALTHCHECK: GET a path on the port this container serves; exit 0 on 200, else 1.

    python healthcheck.py /ping

The port is PORT (default 8080) or, with packed models, the first port in SERVER_MODELS: readiness
on any port covers every packed model. Standard library only, so a probe costs an interpreter start.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request


def port() -> int:
    packed = os.environ.get("SERVER_MODELS", "").strip()
    if packed:
        return int(json.loads(packed)[0]["port"])
    return int(os.environ.get("PORT") or 8080)


def main(argv: list[str]) -> int:
    path = argv[0] if argv else "/ping"
    try:
        url = f"http://127.0.0.1:{port()}{path}"
        with urllib.request.urlopen(url, timeout=4) as response:
            return 0 if response.status == 200 else 1
    except (OSError, ValueError, LookupError, TypeError) as exc:  # refused, 503, unreadable SERVER_MODELS
        print(f"healthcheck: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
