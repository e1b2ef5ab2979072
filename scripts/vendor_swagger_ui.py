"""Copies the files of Swagger UI the API's docs page serves (`GET /api/v1/docs`) from the pinned
`swagger-ui-py` package (a dev dependency) into `chalicelib/api/static/swagger-ui/`, with its licence: the
deployed API serves them itself, nothing is fetched from a CDN at run time, and the Lambda package carries
only these three files instead of the package's 25 MB.

    python scripts/vendor_swagger_ui.py        (after changing the pin in pyproject.toml)
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "LICENSE")
TARGET = Path(__file__).resolve().parent.parent / "chalicelib" / "api" / "static" / "swagger-ui"


def package_static() -> Path:
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or spec.origin is None:
        raise SystemExit("swagger-ui-py is not installed: make install-dev")
    return Path(spec.origin).parent / "static"


def main() -> int:
    TARGET.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(package_static() / name, TARGET / name)
    print(f"copied {', '.join(FILES)} into {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
