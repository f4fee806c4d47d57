"""Packing one gang: where each of its pods should go, or why it cannot all go now.

`plan_gang` packs the pods of one gang onto the working free capacity of the nodes: largest
pods first, each on the node where it leaves the least free GPU (then the least free CPU and
memory), preferring nodes the gang already uses, so that GPUs stay unfragmented and a gang
sits on few nodes. Homogeneous gangs are placed whenever they fit (each placement lowers the
room, sum of per-node pod slots, by exactly one); gangs of several shapes that best fit
misses get two more greedy tries (CPU-heaviest first; fill the emptiest nodes one by one),
then, when small, a bounded exact search (`search`).
The per-node fitting and node choice are `ganggate.core.placement.capacity`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter

from ganggate.core.fit.gpushare import card_shortfall
from ganggate.core.fit.resources import CPU, GPU, MEMORY, Resources, copies_fitting, format_amount, gpus
from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.explain import gpu_message, no_nodes_message, plural, scope_note, unfit_message
from ganggate.core.placement.search import search
from ganggate.core.placement.topology import gang_request as gang_topology
from ganggate.core.placement.topology import place
from ganggate.core.state.outcome import Unfit
from ganggate.core.state.pods import PodInfo


def largest_first(pods: Sequence[PodInfo]) -> list[PodInfo]:
    """Most GPU first (whole, then a share of one card), then most CPU and memory (the order
    best fit packs in)."""
    return sorted(
        pods,
        key=lambda p: (-p.gpu, -p.shared_gpu, -p.request.get(CPU, 0), -p.request.get(MEMORY, 0), p.key),
    )


def cpu_first(pods: Sequence[PodInfo]) -> list[PodInfo]:
    """Most CPU first, then memory and GPU: the second try for gangs of several shapes."""
    return sorted(
        pods,
        key=lambda p: (-p.request.get(CPU, 0), -p.request.get(MEMORY, 0), -p.gpu, p.key),
    )


def plan_gang(
    pods: Sequence[PodInfo], candidates: Capacity, min_count: int | None = None
) -> dict[str, str] | Unfit:
    """Place at least `min_count` (default: all) of the pods, as many as fit.

    On success the placement's requests are taken from `candidates` (so the next gang of
    the round sees what is left) and pod key -> node is returned; otherwise nothing is taken
    and Unfit says why. With topology levels (or a gang topology annotation) the gang goes
    into as few domains as `ganggate.core.placement.topology.place` can find, or waits when required;
    more pods of a gang already placed go near its released members.
    """
    if (len(pods) > 1 or candidates.topology_placed) and (candidates.topology_levels or any(gang_topology(pods[:1]))):
        return place(pods, candidates, _need(pods, min_count), plan_flat)
    return plan_flat(pods, candidates, min_count)


def fits_as_planned(pods: Sequence[PodInfo], candidates: Capacity, min_count: int | None = None) -> bool | None:
    """Whether plan_gang would place the gang (True) or answer Unfit (False), without placing
    it (nothing is taken); None when only placing it would tell. Told for a gang of one shape
    asking whole GPUs, without topology and without GPU cards: plan_gang then goes to
    plan_flat, whose answer is _prune's quick no, or else whether one pass of best fit over the
    index (Capacity.best_fit_run, what _greedy places such a gang with) finds room for `need`
    of them. For searches that ask "does it fit now?" many times (core.policy.preemption)."""
    if not pods or candidates.cards or not _repeatable(pods[0]) or not _one_shape(pods):
        return None
    if (len(pods) > 1 or candidates.topology_placed) and (candidates.topology_levels or any(gang_topology(pods[:1]))):
        return None
    need = _need(pods, min_count)
    if _prune(pods, candidates, need, True) is not None:
        return False
    first = min(pods, key=attrgetter("key"))  # (plan_flat's order for one shape: by key)
    return sum(copies for _, copies in candidates.best_fit_run(first, len(pods))) >= need


def _need(pods: Sequence[PodInfo], min_count: int | None) -> int:
    return len(pods) if min_count is None else max(0, min(min_count, len(pods)))


def plan_flat(
    pods: Sequence[PodInfo], candidates: Capacity, min_count: int | None = None
) -> dict[str, str] | Unfit:
    """plan_gang without topology: best fit over all the candidate nodes."""
    if not pods:
        return {}
    need = _need(pods, min_count)
    one_shape = _one_shape(pods)
    pruned = _prune(pods, candidates, need, one_shape)
    if pruned is not None:
        return pruned
    first = pods[0].request
    several = not one_shape and any(p.request != first for p in pods)
    # One shape: largest first is by key alone (the other sort keys are all equal).
    alike = one_shape or (not several and all(p.shared_gpu == pods[0].shared_gpu for p in pods))
    largest = sorted(pods, key=attrgetter("key")) if alike else largest_first(pods)
    tries = [(largest, candidates.best_node)]
    if several:
        # Gangs of several shapes get two more tries when best fit fails: CPU-heaviest
        # first, and filling nodes one at a time from the emptiest.
        tries += [(cpu_first(pods), candidates.best_node), (largest, candidates.filling_node)]
    message = ""
    for order, choose in tries:
        placement, taken, failed = _greedy(order, candidates, need, choose, one_shape)
        if len(placement) >= need:
            return placement
        if not message:  # said against what is left once the pods that fit are placed
            message = unfit_message(failed, pods, candidates, len(placement), need)
            if failed is not None and failed.shared_gpu > 0 and candidates.cards:
                message = _card_message(failed, candidates)
        for node, request, copies in reversed(taken):
            candidates.take(node, request, -copies)
        candidates.release_cards(placement)
    if several and (found := search(pods, candidates, need)) is not None:
        return found  # a small gang the greedy tries missed, placed by the bounded search
    return Unfit(message)


def _card_message(pod: PodInfo, capacity: Capacity) -> str:
    """Why a pod asking a share of one GPU card found no card (GPU sharing)."""
    index = capacity.index(pod)
    eligible = [capacity.cards[n] for n in sorted(index.members) if n in capacity.cards]
    return card_shortfall(pod.shared_gpu, eligible) + scope_note(index, capacity.rejected(pod))


def _greedy(
    order: list[PodInfo], capacity: Capacity, need: int, choose: Callable[..., str | None], one_shape: bool = False
) -> tuple[dict[str, str], list[tuple[str, Resources, int]], PodInfo | None]:
    """Place the pods in this order, each where `choose` says; stop once `need` is out of
    reach. Returns the placement, what was taken (node, request, copies: to give back) and
    the first pod left out. With best fit, pods of one shape go in bulk, as they would one at
    a time: a gang's first run of them in one pass over the index (Capacity.best_fit_run),
    later ones as many on a node as fit there (see _repeats_best_fit), one take per node.
    `one_shape`: every pod is of one shape (_one_shape), so a run goes to the end."""
    placement: dict[str, str] = {}
    taken: list[tuple[str, Resources, int]] = []
    gang_nodes: dict[str, None] = {}
    first_failed: PodInfo | None = None
    misses = 0
    same_again = _repeats_best_fit(capacity, choose)
    gpu_key, floor = _common_gpu(order[:1] if one_shape else order)
    i, count = 0, len(order)
    while i < count:
        pod = order[i]
        if same_again and not gang_nodes and _repeatable(pod):
            # A gang with no node yet: its next pods of this shape all go in one pass.
            run = count - i if one_shape else _run_length(order, i)
            spots = capacity.best_fit_run(pod, run)
            capacity.take_each(pod.request, spots)
            placed = i
            for spot, copies in spots:
                taken.append((spot, pod.request, copies))
                for one in order[placed:placed + copies]:
                    placement[one.key] = spot
                placed += copies
            if i + run < count:  # pods of other shapes follow: they look at these nodes first
                for spot, _ in spots:
                    _note_gang_node(gang_nodes, spot, capacity, gpu_key, floor)
            for one in order[placed:i + run]:  # no room for these: each is a miss
                misses += 1
                first_failed = first_failed or one
                if count - misses < need:
                    return placement, taken, first_failed
            i += run
            continue
        node = choose(pod, gang_nodes)
        if node is None:
            misses += 1
            first_failed = first_failed or pod
            if count - misses < need:
                break
            i += 1
            continue
        # As many as fit there: one pod at a time would place them there until fits() fails
        # (see _repeats_best_fit); the next pod is of another shape or no longer fits here.
        copies = 1
        if same_again and _repeatable(pod):
            copies = _run_length(order, i, copies_fitting(pod.request, capacity.free[node]))
        capacity.take(node, pod.request, copies)
        taken.append((node, pod.request, copies))
        for placed_pod in order[i:i + copies]:
            placement[placed_pod.key] = node
        _note_gang_node(gang_nodes, node, capacity, gpu_key, floor)
        i += copies
    return placement, taken, first_failed


def _note_gang_node(gang_nodes: dict[str, None], node: str, capacity: Capacity, gpu_key: str, floor: int) -> None:
    """Keep a node the gang placed pods on among the ones its next pods look at first, unless
    no pod of the gang fits there any more (not worth a look)."""
    if floor and capacity.free[node].get(gpu_key, 0) < floor:
        gang_nodes.pop(node, None)
    else:
        gang_nodes[node] = None


def _run_length(order: list[PodInfo], start: int, at_most: int | None = None) -> int:
    """How many pods from order[start] (a _repeatable one) on are of its shape, one after
    another (at most `at_most`, at least one): same request and constraint, no card share."""
    first = order[start]
    request, constraint = first.request, first.constraint_key
    end, stop = start + 1, len(order) if at_most is None else min(len(order), start + at_most)
    while end < stop:
        pod = order[end]
        if pod.request != request or pod.constraint_key != constraint or pod.shared_gpu:
            break
        end += 1
    return end - start


def _repeats_best_fit(capacity: Capacity, choose: Callable[..., str | None]) -> bool:
    """Whether best fit, having put a pod asking GPUs on node n, would put the next pod of the
    same shape on n again while it fits there, so that the search can be skipped.

    Why: n was the fitting node with the least free GPU (L), the gang's own nodes included;
    every node with less than L free GPU did not fit that shape. Taking the pod leaves n with
    L - g < L (g > 0 GPU), and no other node changed, so n, if it still fits, is again the one
    with the least free GPU; a tie at L - g would be a node that fitted with less than L free
    and would have won before. Not for pods without GPU (n's tie-break by CPU changes) nor
    with GPU cards (their own policies choose)."""
    return getattr(choose, "__func__", None) is Capacity.best_node and not capacity.cards


def _common_gpu(pods: Sequence[PodInfo]) -> tuple[str, int]:
    """The one GPU resource every pod asks, and the least any asks (0: none such)."""
    keys = {p.gpu_resources for p in pods}
    if len(keys) != 1 or len(next(iter(keys))) != 1:
        return GPU, 0
    (key,) = next(iter(keys))
    return key, min(p.request[key] for p in pods)


def _repeatable(pod: PodInfo) -> bool:
    """A pod asking whole GPUs, no share of a card: best fit repeats for its shape."""
    return pod.gpu > 0 and pod.shared_gpu == 0


def _one_shape(pods: Sequence[PodInfo]) -> bool:
    """Whether every pod asks the same: request, share of a card and node constraint."""
    first = pods[0]
    request, shared, constraint = first.request, first.shared_gpu, first.constraint_key
    return all(p.request == request and p.shared_gpu == shared and p.constraint_key == constraint for p in pods)


def _prune(pods: Sequence[PodInfo], capacity: Capacity, need: int, one_shape: bool = False) -> Unfit | None:
    """A quick no, from the GPU buckets alone, for gangs that plainly cannot fit (`one_shape`:
    every pod is like the first, see _one_shape)."""
    if one_shape:
        gpu_pods = list(pods) if pods[0].gpu > 0 else []
    else:
        gpu_pods = [p for p in pods if p.gpu > 0]
        if len({p.constraint_key for p in gpu_pods}) > 1:
            return None
    if not gpu_pods:
        return None
    index = capacity.index(gpu_pods[0])
    smallest = gpu_pods[0].gpu if one_shape else min(p.gpu for p in gpu_pods)
    largest = gpu_pods[0] if one_shape else max(gpu_pods, key=lambda p: p.gpu)
    top = index.levels[-1] if index.levels else 0
    if not index.members:
        return Unfit(no_nodes_message(capacity.rejected(gpu_pods[0]), len(capacity.nodes)))
    if gpus(largest.request) > top and len(pods) - 1 < need:
        return Unfit(gpu_message(gpus(largest.request), top) + scope_note(index, capacity.rejected(gpu_pods[0])))
    needed_gpu_pods = need - (len(pods) - len(gpu_pods))
    room = index.room_for(smallest)
    if needed_gpu_pods > room:
        if room == 0:
            return Unfit(gpu_message(smallest, top) + scope_note(index, capacity.rejected(gpu_pods[0])))
        return Unfit(
            f"needs {plural(needed_gpu_pods, 'pod')} of {format_amount(GPU, smallest)} "
            f"{'GPU' if smallest <= 1000 else 'GPUs'} each; "
            f"the free GPUs have room for {room} of them" + scope_note(index, capacity.rejected(gpu_pods[0]))
        )
    return None
