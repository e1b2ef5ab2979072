"""Shared test setup: one moto server per session, reset and re-provisioned for every test that uses it.

Numeric libraries are pinned to one thread: these machines have two cores.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "ORT_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "weknora-ingest-tests")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
