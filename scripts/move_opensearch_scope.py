"""Moves OpenSearch entries from the "space" index scope to the "tenant" one (one index per model and tenant),
from their own `_source` (no re-embedding): `chalicelib.adapters.index.opensearch_scope_move` says how.

    OPENSEARCH_URL=https://... AWS_REGION=... python scripts/move_opensearch_scope.py --all --dry-run
    python scripts/move_opensearch_scope.py --all               # copy, verify, keep the old indexes blocked
    make deploy  (OpenSearchIndexScope=tenant)
    WEKNORA_OPENSEARCH_INDEX_SCOPE=tenant python scripts/move_opensearch_scope.py --all --drop-old

The client is the one the deployed adapter builds (`OPENSEARCH_URL`, SigV4 for an `.amazonaws.com` endpoint
with the default AWS credentials); the knowledge bases' tenants are read from the stack's tables (the same
settings as the functions: `WEKNORA_*` table names, `AWS_REGION`). A moved index stays write-blocked until
it is dropped: writes are refused as busy (the stages retry, the API answers 503) until the deploy switches
the scope, so pause the stage queues' triggers from the move to the end of the deploy. `--reopen` undoes a move
whose switch is not wanted. A refusal leaves the space's index serving, writable and unmoved.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Mapping, Sequence

from opensearchpy.exceptions import TransportError

from chalicelib import bootstrap
from chalicelib.adapters.index.opensearch import OpenSearchEngine
from chalicelib.adapters.index.opensearch_rebuild import REINDEX_TIMEOUT
from chalicelib.adapters.index.opensearch_scope_move import (
    MoveRefused,
    Owners,
    move_to_tenant_scope,
    reopen,
    space_names,
)
from chalicelib.settings import Settings, get_settings


def state_owners(settings: Settings) -> Owners:
    """The tenant of each knowledge base still in the stack's table."""
    kbs = bootstrap.build_services(settings).kbs

    def owners(kb_ids: Sequence[str]) -> Mapping[str, str]:
        return {kb_id: kb.tenant_id for kb_id, kb in kbs.get_many(kb_ids).items()}

    return owners


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--index", metavar="NAME", help="the space's index name (the alias the adapter uses)")
    which.add_argument("--all", action="store_true", help="every space index the client can see")
    parser.add_argument("--url", help="the OpenSearch endpoint (default: OPENSEARCH_URL)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--dry-run", action="store_true", help="print what it would do, change nothing")
    what.add_argument("--drop-old", action="store_true", help="delete moved indexes (after the scope switch)")
    what.add_argument("--reopen", action="store_true", help="undo a move: the old index writable, unmarked")
    parser.add_argument(
        "--timeout", type=float, default=REINDEX_TIMEOUT, help="seconds to wait for a copy (its task)"
    )
    args = parser.parse_args(argv)

    settings = get_settings()
    if args.url:
        settings = dataclasses.replace(settings, opensearch_url=args.url)
    if not settings.opensearch_url:
        parser.error("no endpoint: set OPENSEARCH_URL or pass --url")
    if args.drop_old and settings.opensearch_index_scope != "tenant":
        # dropped while the stack still reads the space's index, every entry would be unsearchable
        parser.error(
            "--drop-old deletes the indexes a `space` stack searches: deploy OpenSearchIndexScope=tenant "
            "first, then run with WEKNORA_OPENSEARCH_INDEX_SCOPE=tenant"
        )
    engine = bootstrap.build_engine(settings, "opensearch")  # the client the deployed adapter builds
    assert isinstance(engine, OpenSearchEngine)
    try:
        names = space_names(engine.client) if args.all else [args.index]
        if not names:
            print("no space index of this adapter found")
            return 0
        if args.reopen:
            for name in names:
                reopen(engine.client, name)
                print(f"{name}: reopened (writable, not moved)")
            return 0
        owners = state_owners(settings)
        for name in names:
            result = move_to_tenant_scope(
                engine.client,
                name,
                owners,
                dry_run=args.dry_run,
                drop_old=args.drop_old,
                timeout=args.timeout,
            )
            if result.moved:
                print(f"{name}: moved ({result.plan.describe()}); now set OpenSearchIndexScope to tenant")
            elif result.dropped:
                print(f"{name}: dropped {result.plan.serving}")
            else:
                print(("dry run: " if args.dry_run else "") + result.plan.describe())
    except MoveRefused as refused:
        print(f"refused: {refused}", file=sys.stderr)
        return 1
    except TransportError as error:  # the status alone: the server's text may quote documents
        print(
            f"OpenSearch answered {error.status_code}; nothing marked moved, re-run to converge",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
