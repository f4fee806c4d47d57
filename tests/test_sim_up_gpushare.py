"""`ganggate sim up --gpu-mem-per-card`: the README's local path for GPU sharing, as a real process.

kubectl applies examples/gpushare/ (two lone sharing pods and a sharing gang of two); every pod
runs with a card chosen by the controller, no card holds more than its memory (kubesim's device
plugin stand-in would have failed the pod), and `ganggate status --gpus` shows the cards.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.test_sim_up import EXAMPLES, eventually, start_up

CARD = "ALIYUN_COM_GPU_MEM_IDX"


def test_the_gpushare_examples_run_on_cards_the_controller_chose(tmp_path: Path) -> None:
    up = start_up(tmp_path, "--nodes", "2", "--gpus-per-node", "2", "--gpu-mem-per-card", "16Gi")
    try:
        applied = up.kubectl("apply", "-f", str(EXAMPLES / "gpushare"))
        assert applied.returncode == 0, applied.stderr
        pods = eventually(lambda: (lambda p: p if len(p) == 4 and all(x["status"].get("phase") == "Running" for x in p)
                                   else None)(up.pods("default")), "the four sharing pods running")
        used: Counter = Counter()
        for pod in pods:
            annotations = pod["metadata"]["annotations"]
            memory = int(pod["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"])
            used[(pod["spec"]["nodeName"], annotations[CARD])] += memory
        assert max(used.values()) <= 16, used
        status = subprocess.run([sys.executable, "-m", "ganggate", "status", "--gpus", "--kubeconfig", str(up.kubeconfig)],
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        for pod in pods:
            assert f"default/{pod['metadata']['name']} (" in status.stdout
    finally:
        assert up.stop() == 0


def test_a_bad_card_size_is_a_one_line_error(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "ganggate", "sim", "up", "--gpu-mem-per-card", "lots",
                             "--kubeconfig-out", str(tmp_path / "kubeconfig")], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("error: gpu memory per card 'lots'") and result.stderr.count("\n") == 1
