"""`ganggate sim serve --load FILE`: objects created at start through the create pipeline, as if
POSTed; a file that cannot be loaded is an error that names what is wrong."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ganggate.core.state.snapshot import make_node, make_pod
from ganggate.sim import Simulator
from ganggate.sim.apiserver.load import load_objects, read_objects


def _write(path, objects, lines=True):
    text = "\n".join(json.dumps(o) for o in objects) if lines else json.dumps({"kind": "List", "items": objects})
    path.write_text(text)
    return path


async def test_loaded_objects_are_served_as_a_post_would_make_them(tmp_path):
    objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}, make_node("gpu-0"),
               make_pod("p0", namespace="ml", gang="g", pod_num=1, gpus=1)]
    for lines in (True, False):
        async with Simulator(nodes=0, scheduler=False, kubelet=False, controllers=False) as sim:
            assert await load_objects(sim.server, read_objects(_write(tmp_path / "c.json", objects, lines))) == 3
            pod = sim.store.get("pods", "ml", "p0")
            # defaulted and admitted as on create: a uid, Pending, the default tolerations, gated
            assert pod["metadata"]["uid"] and pod["status"]["phase"] == "Pending"
            assert {t["key"] for t in pod["spec"]["tolerations"]} == {"node.kubernetes.io/not-ready",
                                                                      "node.kubernetes.io/unreachable"}
            assert sim.store.get("nodes", None, "gpu-0") is not None


async def test_a_refused_object_stops_the_load_naming_it(tmp_path):
    objects = [make_node("gpu-0"), make_pod("p0", namespace="missing")]
    async with Simulator(nodes=0, scheduler=False, kubelet=False, controllers=False) as sim:
        with pytest.raises(ValueError, match=r"object 1 \(Pod p0\) refused: .*missing"):
            await load_objects(sim.server, read_objects(_write(tmp_path / "c.json", objects)))


def test_serve_rejects_a_file_it_cannot_load_before_serving(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"apiVersion": "v1", "kind": "Node"}\nnot json\n')
    unknown = _write(tmp_path / "unknown.json", [{"apiVersion": "example.com/v1", "kind": "Widget"}])
    for path, message in ((bad, "line 2 is not JSON"), (unknown, "no served resource for apiVersion 'example.com/v1'")):
        done = subprocess.run([sys.executable, "-m", "ganggate", "sim", "serve", "--port", "0", "--load", str(path),
                               "--kubeconfig-out", str(tmp_path / "k")], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and message in done.stdout, done.stdout + done.stderr
        assert not (tmp_path / "k").exists()
