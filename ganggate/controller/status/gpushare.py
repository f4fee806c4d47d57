"""`ganggate status --gpus`: per node and per GPU card, the shared memory used and free and the
pods holding it, as `kubectl inspect gpushare -d` shows it (AliyunContainerService/
gpushare-device-plugin cmd/inspect/display.go displayDetails: per node, per card the pods and
their amounts, then Allocated/Total per node and for the cluster). Pure: a ClusterState in,
text out.
"""

from __future__ import annotations

from dataclasses import dataclass

from ganggate.core.state.cluster import ClusterState


@dataclass
class CardRow:
    node: str
    card: str  # the index, or "-" for pods bound without a card recorded
    total: int
    used: int
    free: str  # a number, or "whole" for a card given whole (nvidia.com/gpu)
    pods: str


def _holder(state: ClusterState, key: str) -> str:
    """'ns/pod (amount)', or '(amount, promised)' for a released pod not bound yet."""
    promise = state.promises.get(key)
    if promise is not None and promise.card is not None:
        return f"{key} ({promise.card[1]}, promised)"
    pod = state.pods.get(key)
    amount = pod.gpu_card[1] if pod is not None and pod.gpu_card is not None else "?"
    return f"{key} ({amount})"


def card_rows(state: ClusterState) -> list[CardRow]:
    """One row per card of every node that advertises shared GPUs, nodes and cards in order."""
    rows: list[CardRow] = []
    unrecorded: dict[str, list[tuple[str, int]]] = {}  # node -> (pod key, amount)
    for pod in state.pods.values():
        if pod.node_name and pod.shared_gpu > 0 and pod.gpu_card is None and not pod.terminated:
            unrecorded.setdefault(pod.node_name, []).append((pod.key, pod.shared_gpu))
    for name in sorted(state.nodes):
        cards = state.cards(name)
        if cards is None:
            continue
        whole = cards.whole_cards()
        for card, total in enumerate(cards.capacity):
            holders = ", ".join(_holder(state, key) for key in sorted(cards.holders.get(card, []))) or "-"
            free = "whole" if card in whole else str(cards.free(card))
            rows.append(CardRow(name, str(card), total, cards.used[card], free, holders))
        if name in unrecorded:
            pods = sorted(unrecorded[name])
            holders = ", ".join(f"{key} ({amount})" for key, amount in pods)
            rows.append(CardRow(name, "-", 0, sum(amount for _, amount in pods), "-", holders + " (no card recorded)"))
    return rows


def format_gpus(state: ClusterState) -> str:
    """The per-card table and the cluster's allocated/total shared GPU memory (pure)."""
    rows = card_rows(state)
    if not rows:
        return "No nodes with shared GPUs (aliyun.com/gpu-mem and aliyun.com/gpu-count).\n"
    table = [["NODE", "CARD", "TOTAL", "USED", "FREE", "PODS"]]
    table += [[r.node, r.card, str(r.total), str(r.used), r.free, r.pods] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in table]
    total = sum(r.total for r in rows)
    used = sum(r.used for r in rows)
    share = int(used * 100 / total) if total else 0
    lines += ["", f"Allocated/Total GPU memory in cluster: {used}/{total} ({share}%)"]
    return "\n".join(lines) + "\n"
