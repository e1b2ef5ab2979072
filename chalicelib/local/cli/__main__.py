"""`python -m chalicelib.local.cli`: the same as the `weknora-ingest` entry point."""

import sys

from chalicelib.local.cli import main

sys.exit(main())
