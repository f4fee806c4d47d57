"""Node groups: the autoscaler's view of a cloud provider's instance groups (cloudprovider.NodeGroup:
MinSize, MaxSize, TemplateNodeInfo), with the delay before a new machine's node is Ready and the
chance that the provider has no capacity (a stock-out), and the flag that declares one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ganggate.sim.api.autoscaling import NODE_GROUP_LABEL
from ganggate.sim.helpers.nodes import node_manifest

#: What `--node-group` takes, and its defaults.
FLAG_HELP = ("NAME:MIN:MAX[,gpus=8][,cpu=64][,memory=512Gi][,delay=30][,fail=0][,label=K=V][,taint=K=V:EFFECT]; "
             "a node group the autoscaler may grow from MIN to MAX nodes of this shape, each Ready DELAY "
             "seconds after it is asked for, a scale-up failing (a stock-out) with probability FAIL")


class NodeGroupError(ValueError):
    """A --node-group value that cannot be read; the message says what to write instead."""


@dataclass(frozen=True)
class NodeGroup:
    """One node group: its size bounds and the shape of its nodes."""

    name: str
    min_size: int = 0
    max_size: int = 4
    gpus: int = 8
    cpu: str = "64"
    memory: str = "512Gi"
    delay_seconds: float = 30.0
    failure_rate: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()

    def node_name(self, index: int) -> str:
        return f"{self.name}-{index}"

    def node(self, name: str) -> dict[str, Any]:
        """The Node a new machine of this group registers (its kubelet's initialNode)."""
        labels = {NODE_GROUP_LABEL: self.name, **self.labels}
        return node_manifest(name, self.cpu, self.memory, self.gpus, labels, [dict(t) for t in self.taints])


def parse_node_group(text: str) -> NodeGroup:
    """`gpu:0:8,gpus=8,delay=30` -> NodeGroup; NodeGroupError says what is wrong."""
    head, *options = [part.strip() for part in text.split(",")]
    parts = head.split(":")
    if len(parts) != 3 or not parts[0]:
        raise NodeGroupError(f"--node-group {text!r}: expected NAME:MIN:MAX first (e.g. gpu:0:8), then options ({FLAG_HELP})")
    name, low, high = parts
    try:
        min_size, max_size = int(low), int(high)
    except ValueError:
        raise NodeGroupError(f"--node-group {text!r}: MIN and MAX must be whole numbers, got {low!r} and {high!r}") from None
    if not 0 <= min_size <= max_size:
        raise NodeGroupError(f"--node-group {text!r}: needs 0 <= MIN <= MAX, got {min_size} and {max_size}")
    values: dict[str, Any] = {}
    labels: dict[str, str] = {}
    taints: list[dict[str, str]] = []
    for option in options:
        key, sep, value = option.partition("=")
        if not sep:
            raise NodeGroupError(f"--node-group {text!r}: option {option!r} is not KEY=VALUE")
        try:
            if key == "gpus":
                values["gpus"] = int(value)
            elif key in ("cpu", "memory"):
                values[key] = value
            elif key == "delay":
                values["delay_seconds"] = float(value)
            elif key == "fail":
                values["failure_rate"] = float(value)
                if not 0.0 <= values["failure_rate"] <= 1.0:
                    raise ValueError
            elif key == "label":
                label_key, _, label_value = value.partition("=")
                labels[label_key] = label_value
            elif key == "taint":
                taint_key, _, rest = value.partition("=")
                taint_value, _, effect = rest.partition(":")
                taints.append({"key": taint_key, "value": taint_value, "effect": effect or "NoSchedule"})
            else:
                raise NodeGroupError(f"--node-group {text!r}: unknown option {key!r} ({FLAG_HELP})")
        except NodeGroupError:
            raise
        except ValueError:
            raise NodeGroupError(f"--node-group {text!r}: {key}={value!r} is not a valid value ({FLAG_HELP})") from None
    return NodeGroup(name, min_size, max_size, labels=labels, taints=tuple(taints), **values)
