"""`FileStore.read(url, limit)`: an object bigger than the limit is refused before its bytes are read."""

from __future__ import annotations

from pathlib import Path

import pytest

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.adapters.storage import BackendFileStore, LocalFileStore, RoutingFileStore
from chalicelib.ports import FileStore, ObjectTooLarge


@pytest.mark.parametrize("kind", ["local", "memory", "routed backend"])
def test_a_read_with_a_limit_refuses_a_bigger_object_and_reads_one_within_it(
    kind: str, tmp_path: Path
) -> None:
    store: FileStore
    if kind == "local":
        store = LocalFileStore(tmp_path)
    elif kind == "memory":
        store = MemoryFileStore()
    else:
        store = RoutingFileStore(LocalFileStore(tmp_path), {"b1": BackendFileStore("b1", MemoryFileStore)})
        store = store.backend("b1")
    url = store.save("t/doc.md", b"x" * 11)
    assert store.read(url, limit=11) == b"x" * 11 and store.read(url) == b"x" * 11
    with pytest.raises(ObjectTooLarge) as refused:
        store.read(url, limit=10)
    assert (refused.value.size, refused.value.limit) == (11, 10)
