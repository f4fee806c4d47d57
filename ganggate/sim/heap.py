"""The cyclic GC of a process that serves kubesim: what exists at start kept out of its scans,
and collections less often.

A write allocates hundreds of containers (the decoded body, the patched copy, the stored object),
so CPython's default young-generation threshold (700) runs a collection every few writes, and a
full one, over every stored object and the watch history, every few hundred: on a 1,000-pod batch
that was a tenth of the server's CPU, charged to whatever allocated at the time.
"""

from __future__ import annotations

import gc

#: Young-generation threshold first; then how many young and middle collections make the next older one.
GC_THRESHOLDS = (10_000, 50, 100)


def tune_gc() -> None:
    """Collect once, freeze what is alive (the nodes, the modules: gc.freeze) and raise the
    thresholds to GC_THRESHOLDS; for a process that serves kubesim, once it is up."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
