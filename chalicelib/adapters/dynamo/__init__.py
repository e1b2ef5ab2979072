"""DynamoDB state through PynamoDB, one module per aggregate (the in-memory fakes in adapters/memory/ have the
same names): tenants, knowledge bases, knowledge, dedupe claims, chunks, spans, tags, tasks, graph, wiki,
usage, FAQ entries and the embedding cache.

Every status transition is one conditional write, so concurrent workers, redelivered messages and the
state machine never race each other into an impossible state. Attribute names here are also used by the
state machine's DynamoDB tasks (infra/statemachine/knowledge.asl.json): keep them in step.
"""

from __future__ import annotations

from chalicelib.adapters.dynamo.chunks import DynamoChunkRepo
from chalicelib.adapters.dynamo.graph import DynamoGraphRepo
from chalicelib.adapters.dynamo.knowledge import DynamoKnowledgeRepo
from chalicelib.adapters.dynamo.knowledge_bases import DynamoKnowledgeBaseRepo
from chalicelib.adapters.dynamo.spans import DynamoSpanRepo
from chalicelib.adapters.dynamo.tables import Models, build_models, share_one_connection, shared_connection
from chalicelib.adapters.dynamo.tags import DynamoTagRepo
from chalicelib.adapters.dynamo.tasks import DynamoTaskRepo
from chalicelib.adapters.dynamo.tenants import DynamoApiKeyRepo, DynamoShareRepo, DynamoTenantRepo
from chalicelib.adapters.dynamo.wiki import DynamoWikiRepo

__all__ = [
    "DynamoApiKeyRepo",
    "DynamoChunkRepo",
    "DynamoGraphRepo",
    "DynamoKnowledgeBaseRepo",
    "DynamoKnowledgeRepo",
    "DynamoShareRepo",
    "DynamoSpanRepo",
    "DynamoTagRepo",
    "DynamoTaskRepo",
    "DynamoTenantRepo",
    "DynamoWikiRepo",
    "Models",
    "build_models",
    "share_one_connection",
    "shared_connection",
]
