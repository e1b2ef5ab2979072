"""In-memory adapters of the ports, for fast service-level tests (no moto, no network).

Each fake is small, but where behaviour matters it behaves like the real adapter: the knowledge repository
makes the same conditional transitions as `adapters/dynamo/knowledge.py` (the allowed-from sets come from
`domain/status.py`), the dedupe claim and insert are one atomic step with takeover of a failed holder, a
workflow start is idempotent by name as in Step Functions, and the queue hands messages back as the SQS
event a stage's `handle` receives, with receive counts and a dead-letter queue. Stored records are copies,
so a caller mutating what it read changes nothing until it writes, as with a database.

There is no in-memory retrieval engine: the composition root (`bootstrap.memory_deps`) uses the real
embedded engine (SQLite FTS5 + numpy) on a temporary directory, because an in-memory engine would have to
repeat its tokenisation, BM25 and fusion.
"""

from __future__ import annotations

from chalicelib.adapters.memory.chunks import MemoryChunkRepo
from chalicelib.adapters.memory.embedding_cache import MemoryEmbeddingCache
from chalicelib.adapters.memory.events import MemoryEventPublisher, MemoryWebhookRepo
from chalicelib.adapters.memory.faq import MemoryFaqRepo
from chalicelib.adapters.memory.files import MemoryFileStore
from chalicelib.adapters.memory.graph import MemoryGraphRepo
from chalicelib.adapters.memory.health import MemoryHealthProbe
from chalicelib.adapters.memory.knowledge import MemoryKnowledgeRepo
from chalicelib.adapters.memory.knowledge_bases import MemoryKnowledgeBaseRepo
from chalicelib.adapters.memory.queues import MemoryTaskQueue, QueuedMessage, QueueUnavailable
from chalicelib.adapters.memory.resources import MemoryResourceCatalog
from chalicelib.adapters.memory.scripted import InstantSleep, Scripted, ScriptedUrlImporter
from chalicelib.adapters.memory.settings import memory_settings
from chalicelib.adapters.memory.spans import MemorySpanRepo
from chalicelib.adapters.memory.tags import MemoryTagRepo
from chalicelib.adapters.memory.tasks import MemoryTaskRepo
from chalicelib.adapters.memory.tenants import MemoryApiKeyRepo, MemoryShareRepo, MemoryTenantRepo
from chalicelib.adapters.memory.turns import MemoryTurnBook
from chalicelib.adapters.memory.usage import MemoryUsageRepo
from chalicelib.adapters.memory.wiki import MemoryWikiRepo
from chalicelib.adapters.memory.workflow import Execution, MemoryWorkflow, TaskAnswer

__all__ = [
    "Execution",
    "InstantSleep",
    "MemoryApiKeyRepo",
    "MemoryChunkRepo",
    "MemoryEmbeddingCache",
    "MemoryEventPublisher",
    "MemoryFaqRepo",
    "MemoryFileStore",
    "MemoryGraphRepo",
    "MemoryHealthProbe",
    "MemoryKnowledgeBaseRepo",
    "MemoryKnowledgeRepo",
    "MemoryResourceCatalog",
    "MemoryShareRepo",
    "MemorySpanRepo",
    "MemoryTagRepo",
    "MemoryTaskQueue",
    "MemoryTaskRepo",
    "MemoryTenantRepo",
    "MemoryTurnBook",
    "MemoryUsageRepo",
    "MemoryWebhookRepo",
    "MemoryWikiRepo",
    "MemoryWorkflow",
    "QueueUnavailable",
    "QueuedMessage",
    "Scripted",
    "ScriptedUrlImporter",
    "TaskAnswer",
    "memory_settings",
]
