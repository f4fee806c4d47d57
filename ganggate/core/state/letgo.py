"""Letting go of a large picture a few objects at a time, so no single step holds the GIL long.

Freed at once, 100,000 PodInfo (a relist's old picture) or a round's memo of every node's
occupants and rankings go in one C-level step that held the GIL for 30-60 ms while the event
loop waited for it (bench/bench_loop_stall.py). Emptied entry by entry, the GIL changes hands
between entries. A container is emptied only when nothing else holds it (CPython's reference
count); one still held elsewhere (shared with a new picture, kept by a reader) is only let go.
"""

from __future__ import annotations

import sys
from typing import Any


def let_go(parts: dict[str, Any]) -> None:
    """Empty `parts` (a ClusterState's __dict__ before `adopt`, or an object's attributes), each
    dict, list or set among its values emptied one entry at a time when nothing else holds it."""
    while parts:
        _, part = parts.popitem()
        # Held only by `part` and getrefcount's argument: nobody else sees it emptied.
        if isinstance(part, (dict, list, set)) and sys.getrefcount(part) <= 2:
            if isinstance(part, dict):
                while part:
                    part.popitem()
            else:
                while part:
                    part.pop()
        del part


def let_go_of_memo(memo: dict[str, object]) -> None:
    """Empty `memo` (Capacity.memo): each value that nothing else holds has its attributes let go
    of as `let_go` does; one still held elsewhere is only let go."""
    while memo:
        _, value = memo.popitem()
        attributes = getattr(value, "__dict__", None)
        if attributes is not None and sys.getrefcount(value) <= 2:  # (value and the argument)
            del attributes
            let_go(vars(value))
        del value
