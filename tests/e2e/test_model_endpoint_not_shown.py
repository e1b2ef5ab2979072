"""The operator's model endpoint never reaches a tenant: a knowledge base names a catalog entry
("remote-embed"), whose spec carries the operator's host, port and parameters
(`openai/internal-emb@http://127.0.0.1:PORT/v1#dim=8`); the spans a tenant reads show the model only.
(Found by a review: the embedding stage's outputs carried the whole spec.)"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from chalicelib.domain.metering import shown_model_id

DIM = 8


class EmbeddingServer:
    """An OpenAI-compatible /embeddings endpoint on loopback: each text's vector from its digest."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                data = [
                    {"object": "embedding", "index": i, "embedding": [b / 255 for b in digest[:DIM]]}
                    for i, digest in enumerate(hashlib.sha256(str(t).encode()).digest() for t in texts)
                ]
                raw = json.dumps({"data": data, "usage": {"prompt_tokens": 1, "total_tokens": 1}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def remote_embedding(services: Any) -> Iterator[EmbeddingServer]:
    from chalicelib.settings import ModelCatalog

    server = EmbeddingServer()
    models = services.settings.models
    entries = {kind: dict(offered) for kind, offered in models.catalog.entries.items()}
    entries.setdefault("embedding", {})["remote-embed"] = f"openai/internal-emb@{server.base_url}#dim={DIM}"
    services.settings = replace(services.settings, models=replace(models, catalog=ModelCatalog(entries)))
    services.models = None  # the registry is rebuilt with the new catalog (and its allowed hosts)
    yield server
    server.close()


def test_a_spec_shows_its_provider_and_model_only() -> None:
    assert shown_model_id("openai/internal-emb@http://10.0.0.5:8080/v1#dim=8") == "openai/internal-emb"
    assert shown_model_id("local/minilm") == "local/minilm"


def test_spans_do_not_show_the_operators_model_endpoint(
    api: Any, runtime: Any, remote_embedding: Any
) -> None:
    kb = api.create_kb(embedding_model_id="remote-embed")
    up = api.upload(kb["id"], "note.md", b"# Note\n\nSome text about harbours and ships.\n")
    assert up.status_code == 200, up.json_body
    knowledge_id = up.json_body["data"]["id"]
    runtime.drain(timeout=180)
    assert api.knowledge(knowledge_id)["parse_status"] == "completed"
    spans = api.get(f"/knowledge/{knowledge_id}/spans")
    assert spans.status_code == 200
    text = json.dumps(spans.json_body)
    assert '"model": "openai/internal-emb"' in text  # the embedding stage's outputs still name the model
    host = remote_embedding.base_url.split("//", 1)[1].split("/", 1)[0]
    assert host not in text and "#dim=" not in text
