"""The whole contract against a real OpenSearch (kNN, hybrid and Hangul bigrams included).

Runs only with `-m opensearch` and OPENSEARCH_URL set, e.g.
    OPENSEARCH_URL=https://search-x.eu-west-1.es.amazonaws.com OPENSEARCH_AWS_AUTH=1 AWS_REGION=eu-west-1
        pytest -m opensearch tests/index
OPENSEARCH_RECORD_IDS=1 runs the Serverless delete mode; OPENSEARCH_KNN_ENGINE picks lucene/faiss;
OPENSEARCH_REFRESH=0 sends no refresh (Serverless; then reads may lag writes and tests can flake).
Every test uses its own space (index) and drops it afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest
from index_contract import EngineContract

from chalicelib.adapters.index.opensearch import OpenSearchEngine, build_opensearch_client
from chalicelib.ports import IndexSpace, RetrieveEngine

pytestmark = [
    pytest.mark.opensearch,
    pytest.mark.skipif(not os.environ.get("OPENSEARCH_URL"), reason="OPENSEARCH_URL is not set"),
]


class TestOpenSearchLive(EngineContract):
    @pytest.fixture
    def engine(self, space: IndexSpace) -> Iterator[OpenSearchEngine]:
        client = build_opensearch_client(
            os.environ["OPENSEARCH_URL"],
            region=os.environ.get("AWS_REGION"),
            aws_auth=os.environ.get("OPENSEARCH_AWS_AUTH", "") not in ("", "0", "false"),
        )
        record_ids = os.environ.get("OPENSEARCH_RECORD_IDS", "") not in ("", "0", "false")
        engine = OpenSearchEngine(
            client,
            refresh=os.environ.get("OPENSEARCH_REFRESH", "true") not in ("0", "false"),
            record_ids=record_ids,
            knn_engine=os.environ.get("OPENSEARCH_KNN_ENGINE", "lucene"),
        )
        yield engine
        engine.drop_index(space)

    def stored_vector(
        self, engine: RetrieveEngine, space: IndexSpace, kb_id: str, entry_id: str
    ) -> np.ndarray:
        assert isinstance(engine, OpenSearchEngine)
        hits = engine.client.search(index=space.name, body={"query": {"term": {"id": entry_id}}})["hits"][
            "hits"
        ]
        assert len(hits) == 1
        return np.asarray(hits[0]["_source"]["embedding"], dtype=np.float32)
