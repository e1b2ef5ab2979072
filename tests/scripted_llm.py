"""A scripted OpenAI-compatible model server on loopback, speaking the real wire format
(POST /v1/chat/completions, vision as an `image_url` content part, POST /v1/embeddings), so enrichment is tested through the
real adapters and the SSRF-safe transport. Replies are deterministic functions of the request, chosen by
what the system prompt asks for; every request is recorded.

    with ScriptedLLM() as llm:
        use_models(services, llm)   # the operator's catalog offers "scripted" (chat) and "scripted-vision"
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT = "scripted"
VISION = "scripted-vision"
#: the size of the vectors POST /v1/embeddings answers
EMBEDDING_DIM = 8


def token_for(text: str) -> str:
    """A word no document contains, derived from a passage: a generated question carries it."""
    return "qtok" + hashlib.sha1(text.encode()).hexdigest()[:8]


class ScriptedLLM:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail_kinds: set[str] = set()  # kinds answered with HTTP 400
        self._lock = threading.Lock()
        llm = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                status, payload = llm.answer(body)
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self) -> ScriptedLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kinds(self) -> list[str]:
        with self._lock:
            return [r["kind"] for r in self.requests]

    # ---------------------------------------------------------------- replies

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if "input" in body:  # POST /v1/embeddings
            return 200, self._embeddings(body["input"])
        messages = body.get("messages", [])
        system = next((m["content"] for m in messages if m.get("role") == "system"), "")
        user = next((m["content"] for m in messages if m.get("role") == "user"), "")
        if isinstance(user, list):  # a vision request: text and image parts
            prompt = " ".join(p.get("text", "") for p in user if p.get("type") == "text")
            kind = "ocr" if "Transcribe" in prompt else "caption"
        else:
            kind = self._kind(system)
        with self._lock:
            self.requests.append(
                {"kind": kind, "model": body.get("model"), "user": user if isinstance(user, str) else prompt}
            )
        if kind in self.fail_kinds:
            return 400, {"error": {"message": "scripted failure", "code": "invalid_request"}}
        text = getattr(self, f"_{kind}")(system, user if isinstance(user, str) else "", body)
        return 200, {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
            ],
        }

    @staticmethod
    def _embeddings(texts: Any) -> dict[str, Any]:
        """Each text's vector from its digest (EMBEDDING_DIM components)."""
        texts = texts if isinstance(texts, list) else [texts]
        data = [
            {"object": "embedding", "index": i, "embedding": [b / 255 for b in digest[:EMBEDDING_DIM]]}
            for i, digest in enumerate(hashlib.sha256(str(t).encode()).digest() for t in texts)
        ]
        return {
            "object": "list",
            "data": data,
            "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)},
        }

    @staticmethod
    def _kind(system: str) -> str:
        for marker, kind in (
            ("document summaries", "summary"),
            ("search questions", "questions"),
            ("knowledge graph", "graph"),
            ("data tables", "table"),
            ("wiki", "wiki"),
            ("tag documents", "tags"),
        ):
            if marker in system:
                return kind
        return "other"

    def _summary(self, system: str, user: str, body: dict[str, Any]) -> str:
        words = re.findall(r"[A-Za-z]{5,}", user.split("<document>", 1)[-1])
        return f"This document, scripted summary, covers {' '.join(words[:8])}."

    def _questions(self, system: str, user: str, body: dict[str, Any]) -> str:
        n = int(re.search(r"write (\d+) self-contained", system).group(1))  # type: ignore[union-attr]
        passage = user.split("<passage>", 1)[1].split("</passage>", 1)[0].strip()
        token = token_for(passage)
        return "\n".join(
            f"{i + 1}. Which {token} detail number {i + 1} does this passage give?" for i in range(n)
        )

    def _graph(self, system: str, user: str, body: dict[str, Any]) -> str:
        items: list[dict[str, Any]] = []
        for number, passage in re.findall(r"Passage (\d+):\n(.*?)(?=\n\nPassage \d+:|\Z)", user, re.S):
            names = list(dict.fromkeys(re.findall(r"\b[A-Z][a-z]{3,}\b", passage)))[:3]
            for name in names:
                items.append({"passage": int(number), "entity": name, "entity_attributes": ["scripted"]})
            for a, b in itertools.pairwise(names):
                items.append({"passage": int(number), "entity1": a, "entity2": b, "relation": "related_to"})
        return "```json\n" + json.dumps(items) + "\n```"

    def _table(self, system: str, user: str, body: dict[str, Any]) -> str:
        columns = re.findall(r"^- (.+?) \(\w+\)$", user, re.M)
        return json.dumps(
            {
                "description": "A scripted table summary: a timetable of harbour ferries.",
                "columns": [{"name": c, "description": f"the {c} of each row"} for c in columns],
            }
        )

    def _wiki(self, system: str, user: str, body: dict[str, Any]) -> str:
        title = user.split("\n", 1)[0].removeprefix("Document: ").strip()
        return json.dumps([{"title": f"{title} wikipage", "content": f"A scripted wiki page about {title}."}])

    def _tags(self, system: str, user: str, body: dict[str, Any]) -> str:
        """A listed tag whose name the document contains: confident (0.95, then 0.90, ...); the first one
        it does not contain: 0.6 (below the bar); and an index outside the list."""
        listed, _, document = user.partition("\n\nDocument:\n")
        names = re.findall(r"^(\d+)\. (.+)$", listed, re.M)
        matches: list[dict[str, Any]] = []
        confident = 0.95
        for index, name in names:
            if name.casefold() in document.casefold():
                matches.append({"index": int(index), "confidence": round(confident, 2)})
                confident -= 0.05
        absent = [int(i) for i, name in names if name.casefold() not in document.casefold()]
        if absent:
            matches.append({"index": absent[0], "confidence": 0.6})
        matches.append({"index": len(names) + 7, "confidence": 0.99})
        return json.dumps({"matches": matches})

    def _caption(self, system: str, user: str, body: dict[str, Any]) -> str:
        return "A scripted caption: an orange kiln glowing in a pottery studio."

    def _ocr(self, system: str, user: str, body: dict[str, Any]) -> str:
        return "NO_TEXT"

    def _other(self, system: str, user: str, body: dict[str, Any]) -> str:
        return "scripted"


def use_models(services: Any, llm: ScriptedLLM) -> None:
    """The operator's catalog offers the scripted models; the adapters are rebuilt to reach them."""
    from chalicelib.settings import ModelCatalog

    models = services.settings.models
    entries = {kind: dict(offered) for kind, offered in models.catalog.entries.items()}
    entries["chat"][CHAT] = f"openai/scripted-chat@{llm.base_url}"
    entries["vision"][VISION] = f"openai/scripted-vl@{llm.base_url}"
    services.settings = replace(services.settings, models=replace(models, catalog=ModelCatalog(entries)))
    services.models = None  # the registry is rebuilt with the new catalog (and its allowed hosts)
