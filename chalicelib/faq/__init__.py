"""FAQ knowledge bases (spec §1.24): entries, their index entries, FAQ search, and bulk import.

- `normalise`: the normalised text and the content hash that import diffs by;
- `model`: the entry record and its index entries;
- `validation`: the import plan (append / replace rules), pure;
- `rows`: reading JSON / CSV / XLSX rows and writing the failed-rows CSV;
- `entries`: create, read, update, delete, list, search (use cases over the ports);
- `index`: an entry's index entries written and removed through the retrieval engine;
- `importing`: the import request (lease, task, queue) and the work of the queued worker
  (`chalicelib/stages/faq_import.py`, the faq-import queue's handler).
- `routes`: the HTTP operations app.py routes to.
"""
