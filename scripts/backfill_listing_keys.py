"""Deploy-time migration for the knowledge listing (Issue 10): rows written before the `kb-source-index` and
`kb-type-index` GSIs existed get their keys, so filtering by source or file type finds them.

    WEKNORA_PREFIX=... AWS_REGION=... python scripts/backfill_listing_keys.py

Run once after the stack update that adds the GSIs (a scan of the knowledge table); running it again is
harmless. Tag relations need no backfill: tags did not exist before, and tag ids are now checked.
"""

from __future__ import annotations

from chalicelib.adapters.dynamo import DynamoKnowledgeRepo, build_models
from chalicelib.settings import get_settings


def main() -> None:
    settings = get_settings()
    repo = DynamoKnowledgeRepo(build_models(settings), settings.region)
    print(f"rows given listing keys: {repo.backfill_listing_keys()}")


if __name__ == "__main__":
    main()
