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
the scope, so pause the stage queues' triggers from the move to the end of the deploy. From the first move on,
a space index made anew (a model's first entry) is write-blocked too (index templates), and `--all` lists the
indexes again until it finds none new; the templates go once no index waits for the switch (after
`--drop-old`, `--reopen`, or a refusal with nothing moved). Entries of no knowledge base still there are left
behind only with `--orphans N`, N the dry run's count. Two runs on one index: the second refuses; a run that
was killed is taken over with `--take-over`. `--reopen` undoes a move whose switch is not wanted, before the
deploy only. A refusal leaves the space's index serving, writable and unmoved.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator, Mapping, Sequence

from opensearchpy import OpenSearch
from opensearchpy.exceptions import TransportError

from chalicelib import bootstrap
from chalicelib.adapters.index.opensearch import OpenSearchEngine
from chalicelib.adapters.index.opensearch_rebuild import REINDEX_TIMEOUT
from chalicelib.adapters.index.opensearch_scope_move import (
    MoveRefused,
    Owners,
    lift_new_space_index_block_when_idle,
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


def each_space(client: OpenSearch, index: str | None) -> Iterator[str]:
    """`index`, or every space index, listed again after each pass until a pass finds none new: one a model's
    first entry made meanwhile is moved too."""
    if index is not None:
        yield index
        return
    seen: set[str] = set()
    while names := [name for name in space_names(client) if name not in seen]:
        for name in names:
            seen.add(name)
            yield name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--index", metavar="NAME", help="the space's index name (the alias the adapter uses)")
    which.add_argument("--all", action="store_true", help="every space index the client can see")
    parser.add_argument("--url", help="the OpenSearch endpoint (default: OPENSEARCH_URL)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--dry-run", action="store_true", help="print what it would do, change nothing")
    what.add_argument("--drop-old", action="store_true", help="delete moved indexes (after the scope switch)")
    what.add_argument(
        "--reopen", action="store_true", help="undo a move before the deploy: writable, unmarked"
    )
    parser.add_argument(
        "--orphans",
        type=int,
        default=0,
        metavar="N",
        help="move although N entries of no knowledge base still there stay behind (the dry run's count)",
    )
    parser.add_argument(
        "--take-over", action="store_true", help="the move run an index names was killed: take it over"
    )
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
    if args.reopen and settings.opensearch_index_scope == "tenant":
        # after the switch the tenant indexes take the writes: a reopen and a new move would drop them
        parser.error("--reopen calls a move off before the deploy: the stack's scope is `tenant` already")
    engine = bootstrap.build_engine(settings, "opensearch")  # the client the deployed adapter builds
    assert isinstance(engine, OpenSearchEngine)
    client = engine.client
    not_dropped: list[str] = []
    try:
        owners = state_owners(settings)
        found = False
        for name in each_space(client, args.index):
            found = True
            if args.reopen:
                reopen(client, name, owners)
                print(f"{name}: reopened (writable, not moved)")
                continue
            try:
                result = move_to_tenant_scope(
                    client,
                    name,
                    owners,
                    dry_run=args.dry_run,
                    drop_old=args.drop_old,
                    orphans=args.orphans,
                    take_over=args.take_over,
                    timeout=args.timeout,
                )
            except MoveRefused as refused:
                if not args.drop_old:
                    raise
                print(f"refused: {refused}", file=sys.stderr)  # the others are dropped all the same
                not_dropped.append(name)
                continue
            if result.moved:
                print(f"{name}: moved ({result.plan.describe()}); now set OpenSearchIndexScope to tenant")
            elif result.dropped:
                print(f"{name}: dropped {result.plan.serving}")
            else:
                print(("dry run: " if args.dry_run else "") + result.plan.describe())
        if not found:
            print("no space index of this adapter found")
    except MoveRefused as refused:
        print(f"refused: {refused}", file=sys.stderr)
        _lift_when_idle(client)
        return 1
    except TransportError as error:  # the status alone: the server's text may quote documents
        print(
            f"OpenSearch answered {error.status_code}; nothing marked moved, re-run to converge",
            file=sys.stderr,
        )
        return 1
    if not args.dry_run:
        _lift_when_idle(client)
    if not_dropped:
        print(f"not dropped (not moved yet: move them first): {', '.join(not_dropped)}", file=sys.stderr)
        return 1
    return 0


def _lift_when_idle(client: OpenSearch) -> None:
    try:
        if lift_new_space_index_block_when_idle(client):
            print("new space indexes are no longer write-blocked (no move pending)")
    except (MoveRefused, TransportError):  # the templates stay: a later run lifts them
        print("new space indexes stay write-blocked until a run finds no move pending", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
