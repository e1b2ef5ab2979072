"""Rebuilds OpenSearch indices to the current analysis, behind an alias of their name, from their own
`_source` (no re-embedding): `chalicelib.adapters.index.opensearch_rebuild` says how.

    OPENSEARCH_URL=https://... AWS_REGION=... python scripts/rebuild_opensearch_index.py --all --dry-run
    python scripts/rebuild_opensearch_index.py --index weknora-baai-bge-m3-1024

The client is the one the deployed adapter builds (`OPENSEARCH_URL`, SigV4 for an `.amazonaws.com` endpoint
with the default AWS credentials). Writes to an index are blocked while it is copied: the stages retry and the
API answers 503 meanwhile, so pausing the stage queues' triggers is advisable (a stage blocked past its tries
fails its document), not required for correctness. A refusal leaves the old index serving and writable; a copy
still running after `--timeout` is named by its task id, and a re-run refuses until it is done.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from opensearchpy.exceptions import TransportError

from chalicelib import bootstrap
from chalicelib.adapters.index.opensearch import OpenSearchEngine
from chalicelib.adapters.index.opensearch_rebuild import (
    REINDEX_TIMEOUT,
    RebuildRefused,
    index_names,
    rebuild_index,
)
from chalicelib.settings import get_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--index", metavar="NAME", help="the space's index name (the alias the adapter uses)")
    which.add_argument("--all", action="store_true", help="every index of the adapter the client can see")
    parser.add_argument("--url", help="the OpenSearch endpoint (default: OPENSEARCH_URL)")
    parser.add_argument("--dry-run", action="store_true", help="print what it would do, change nothing")
    parser.add_argument(
        "--timeout", type=float, default=REINDEX_TIMEOUT, help="seconds to wait for a copy (its task)"
    )
    args = parser.parse_args(argv)

    settings = get_settings()
    if args.url:
        settings = dataclasses.replace(settings, opensearch_url=args.url)
    if not settings.opensearch_url:
        parser.error("no endpoint: set OPENSEARCH_URL or pass --url")
    engine = bootstrap.build_engine(settings, "opensearch")  # the client the deployed adapter builds
    assert isinstance(engine, OpenSearchEngine)
    try:
        names = index_names(engine.client) if args.all else [args.index]
        if not names:
            print("no index of this adapter found")
        for name in names:
            result = rebuild_index(engine.client, name, dry_run=args.dry_run, timeout=args.timeout)
            if result.rebuilt:
                print(f"{name}: rebuilt as {result.plan.target} ({result.documents} documents)")
            else:
                print(("dry run: " if args.dry_run else "") + result.plan.describe())
    except RebuildRefused as refused:
        print(f"refused: {refused}", file=sys.stderr)
        return 1
    except TransportError as error:  # the status alone: the server's text may quote documents
        print(
            f"OpenSearch answered {error.status_code}; nothing swapped, re-run to converge", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
