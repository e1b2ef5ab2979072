"""Enrichment work run by the state machine's subtasks: summaries, questions, graph, wiki, OCR/captions."""
