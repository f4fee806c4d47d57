"""`ganggate plan --snapshot`: the offline what-if, run as a user runs it."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ganggate.cli import main
from ganggate.core.state.snapshot import make_node, make_pod
from tests.kubectl_support import KUBECTL

DATA = Path(__file__).parent / "data"
SMALL = DATA / "snapshot-small.json"
NEVER_STARVING = ["--starvation-seconds", "1e12"]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def rows(table: str) -> dict[str, list[str]]:
    """GANG -> the other columns, split on runs of two or more spaces."""
    import re

    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("GANG"))
    return {cols[0]: cols[1:] for cols in (re.split(r"\s{2,}", line) for line in lines[start + 1 :]) if cols[0]}


def test_the_table_says_which_gangs_fit_where_and_why_not(capsys) -> None:
    code, out, err = run(capsys, "--snapshot", str(SMALL), *NEVER_STARVING)
    assert code == 0 and err == ""
    assert out.splitlines()[0] == (
        "5 nodes (4 ready, 20 GPUs free on schedulable nodes), 13 pods; 4 gated gangs, 2 would be released now"
    )
    table = rows(out)
    assert table["ml/llama"] == ["waiting", "2/2", "16", "yes", "gpu-1: 1, gpu-2: 1", "2 pods on 2 nodes"]
    # big (older than bert) does not fit; bert still goes where big could not (backfill).
    assert table["ml/big"][3:] == [
        "no", "-", "GangUnschedulable: needs 8 nvidia.com/gpu on one node; the largest free is 4 "
        "(on the 4 nodes its pods may use; 1 node(s) were not ready)"
    ]
    assert table["ml/bert"][3:5] == ["yes", "gpu-0: 1"]
    assert table["ml/sweep"] == ["incomplete", "3/4", "6", "no", "-", "GangWaiting: 3 of 4 pods exist"]
    assert "vc/volcano-job" not in table  # another scheduler's gang is not ganggate's


def test_a_cut_short_release_taints_cordons_and_conflicts(capsys) -> None:
    code, out, _ = run(capsys, "--snapshot", str(DATA / "snapshot-mixed.json"), *NEVER_STARVING)
    assert code == 0
    table = rows(out)
    # Two of ddp's four pods were released onto a100-0 before the controller died: that node
    # counts as promised, and the other two are placed first, on the other a100 node.
    assert table["ml/ddp"] == ["partial", "4/4", "8", "yes", "a100-1: 2",
                               "finishing decision 5f1c2a9e0b7d4e21: 2 pods on 1 node"]
    assert table["ml/untolerated"][5] == (
        "GangUnschedulable: needs 1 nvidia.com/gpu on one node; the largest free is 0 (on the 1 node its pods "
        "may use; 3 node(s) had untolerated taint {nvidia.com/gpu: present}, 1 node(s) were unschedulable)"
    )
    assert table["ml/odd"][:4] == ["conflict", "2", "2", "no"]
    assert table["ml/odd"][5] == "GangConflict: pods disagree on scheduling.k8s.io/group-pod-num: 2 (odd-0), 3 (odd-1)"
    assert table["ml/t4-infer"][3:5] == ["yes", "t4-0: 2"]
    # elastic may start with 2 of its 6 pods, but only one 4-GPU slot is left.
    assert table["ml/elastic"][3] == "no"


def test_json_output_and_other_schedulers(capsys) -> None:
    code, out, _ = run(capsys, "--snapshot", str(SMALL), "--output", "json", "--scheduler-name", "volcano")
    assert code == 0
    report = json.loads(out)
    assert [g["gang"] for g in report["gangs"]] == ["vc/volcano-job"]
    assert report["gangs"][0]["fits"] is True and report["gangs"][0]["nodes"] == {"gpu-0": 1}
    code, out, _ = run(capsys, "--snapshot", str(SMALL), "-o", "json", *NEVER_STARVING)
    report = json.loads(out)
    placed = {g["gang"]: g["placement"] for g in report["gangs"] if g["fits"]}
    assert placed == {
        "ml/bert": {"ml/bert-0": "gpu-0"},
        "ml/llama": {"ml/llama-0": "gpu-1", "ml/llama-1": "gpu-2"},
    }


def test_the_seeds_count_check_for_comparison(capsys, tmp_path) -> None:
    # Two 8-GPU nodes whose CPUs are all taken: the count check would release the gang.
    nodes = [make_node(f"n{i}", cpu="16") for i in range(2)]
    hogs = [make_pod(f"hog-{i}", cpu="16", node_name=f"n{i}", phase="Running") for i in range(2)]
    job = [make_pod(f"job-{i}", namespace="ml", gang="job", pod_num=2, gpus=8, cpu="4") for i in range(2)]
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"kind": "List", "items": nodes + hogs + job}))
    _, out, _ = run(capsys, "--snapshot", str(path), "--policy", "count", *NEVER_STARVING)
    assert rows(out)["ml/job"][3:5] == ["yes", "-"]  # released, nowhere in particular
    _, out, _ = run(capsys, "--snapshot", str(path), *NEVER_STARVING)
    assert rows(out)["ml/job"][3:] == [
        "no", "-", "GangUnschedulable: needs 4 cpu on one node; the largest free among nodes with 8 free GPU is 0"
    ]


def test_yaml_from_stdin_with_the_console_script(tmp_path) -> None:
    text = yaml.safe_dump(json.loads(SMALL.read_text()))
    script = Path(sys.executable).parent / "ganggate"
    done = subprocess.run([str(script), "plan", "--snapshot", "-", *NEVER_STARVING], input=text,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert rows(done.stdout)["ml/llama"][3] == "yes"


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json: [", "neither JSON nor YAML"),
        ('{"kind": "List", "items": [{"kind": "Service", "metadata": {"name": "s"}}]}', "no Node or Pod objects"),
        ('{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "many"}}}]}',
         "node n: not a quantity: 'many'"),
        ("[1, 2]", "expected a Kubernetes List object"),
    ],
)
def test_bad_snapshots_get_a_clear_error_and_exit_2(capsys, tmp_path, content, message) -> None:
    path = tmp_path / "snap.json"
    path.write_text(content)
    code, out, err = run(capsys, "--snapshot", str(path))
    assert code == 2 and out == ""
    assert message in err and err.startswith("ganggate plan: ")


def test_a_missing_file(capsys, tmp_path) -> None:
    code, _, err = run(capsys, "--snapshot", str(tmp_path / "nope.json"))
    assert code == 2 and "cannot read" in err


# ---- on real nodes: six GPU nodes of Alibaba's production cluster ---------------------------

MODEL = "alibaba.com/gpu-model"


def alibaba_nodes() -> list[dict]:
    """Nodes from tests/data/alibaba-gpu-v2023-nodes.csv (CC-BY 4.0, Weng et al., ATC 2023)."""
    with (DATA / "alibaba-gpu-v2023-nodes.csv").open() as f:
        lines = [line for line in f if not line.startswith("#")]
    return [
        make_node(row["sn"], gpus=int(row["gpu"]), cpu=f"{row['cpu_milli']}m", memory=f"{row['memory_mib']}Mi",
                  labels={MODEL: row["model"]})
        for row in csv.DictReader(lines)
    ]


def test_what_if_on_nodes_of_a_real_gpu_cluster(capsys, tmp_path) -> None:
    nodes = alibaba_nodes()
    assert [n["status"]["allocatable"]["nvidia.com/gpu"] for n in nodes] == ["2", "2", "4", "8", "8", "8"]

    def job(name: str, n: int, gpus: int, cpu: str, model: str | None, created: str) -> list[dict]:
        return [make_pod(f"{name}-{i}", namespace="ai", gang=name, pod_num=n, gpus=gpus, cpu=cpu, memory="64Gi",
                         created=created, node_selector={MODEL: model} if model else None) for i in range(n)]

    pods = [make_pod("infer", namespace="ai", gpus=4, cpu="16", node_name="openb-node-0026", phase="Running")]
    pods += job("wide", 2, 8, "100", None, "2024-05-01T08:59:00Z")  # 100 CPUs: only the G3 node has them
    pods += job("v100-pair", 2, 4, "12", "V100M32", "2024-05-01T09:00:00Z")  # 4 + 8 GPUs of V100M32
    pods += job("t4-quad", 4, 2, "8", "T4", "2024-05-01T09:01:00Z")  # one T4 node of 2 GPUs: no
    pods += job("small", 3, 2, "8", None, "2024-05-01T09:03:00Z")
    path = tmp_path / "alibaba.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes + pods}))
    code, out, _ = run(capsys, "--snapshot", str(path), "-o", "json", *NEVER_STARVING)
    assert code == 0
    report = {g["gang"]: g for g in json.loads(out)["gangs"]}
    assert report["ai/v100-pair"]["nodes"] == {"openb-node-0023": 1, "openb-node-0247": 1}
    assert report["ai/t4-quad"]["why"].startswith(  # one T4 node of 2 GPUs: never 4 pods of 2
        "GangCannotFit: needs 4 pods of 2 GPUs each, but the 1 node it may use holds only 1 even when empty")
    assert not report["ai/wide"]["fits"]
    assert report["ai/wide"]["why"].startswith(  # only one node has 100 cpu: never two such pods
        "GangCannotFit: needs 2 pods of 8 GPUs and 100 cpu each, but the 6 nodes it may use hold only 1 even when empty")
    # The small gang fills leftovers best-fit: the 2-GPU nodes first, then the G2 node's 4.
    assert report["ai/small"]["fits"]
    assert sum(report["ai/small"]["nodes"].values()) == 3
    assert set(report["ai/small"]["nodes"]) <= {"openb-node-0000", "openb-node-0036", "openb-node-0026"}


# ---- a snapshot taken with kubectl from a running cluster (kubesim over HTTP) ----------------


MANIFESTS = """\
apiVersion: v1
kind: Pod
metadata: {name: notebook, namespace: default}
spec:
  containers:
  - name: main
    image: busybox:1.36
    resources: {limits: {nvidia.com/gpu: "6"}}
"""


def gang_manifest(name: str, size: int, gpus: int) -> str:
    docs = []
    for i in range(size):
        docs.append(f"""\
apiVersion: v1
kind: Pod
metadata:
  name: {name}-{i}
  namespace: default
  annotations: {{scheduling.k8s.io/group-name: {name}, scheduling.k8s.io/group-pod-num: "{size}"}}
spec:
  schedulingGates: [{{name: scheduling.k8s.io/group-gate}}]
  containers:
  - name: main
    image: busybox:1.36
    resources: {{limits: {{nvidia.com/gpu: "{gpus}"}}}}
""")
    return "---\n".join(docs)


async def test_plan_on_a_kubectl_snapshot_of_a_live_cluster(tmp_path) -> None:
    import asyncio
    import os

    from ganggate.sim import Simulator

    async def command(*args: str, stdin: str | None = None, env: dict | None = None) -> str:
        process = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env)
        out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin else None), 60)
        assert process.returncode == 0, err.decode()
        return out.decode()

    async with Simulator(nodes=3, gpus_per_node=8, scheduler=True, kubelet=True) as sim:
        env = dict(os.environ, HOME=str(tmp_path), KUBECONFIG=sim.kubeconfig)

        async def kubectl(*args: str, stdin: str | None = None) -> str:
            return await command(KUBECTL, "--cache-dir", str(tmp_path / "cache"), *args, stdin=stdin, env=env)

        await kubectl("apply", "-f", "-", stdin=MANIFESTS)
        for _ in range(200):  # safety net: the scheduler binds the notebook within moments
            notebook = json.loads(await kubectl("get", "pod", "notebook", "-o", "json"))
            if notebook["spec"].get("nodeName"):
                break
            await asyncio.sleep(0.05)
        busy = notebook["spec"]["nodeName"]
        await kubectl("apply", "-f", "-", stdin=gang_manifest("pair", 2, 8))
        await kubectl("apply", "-f", "-", stdin=gang_manifest("trio", 3, 4))
        snapshot = tmp_path / "snapshot.json"
        snapshot.write_text(await kubectl("get", "nodes,pods", "-A", "-o", "json"))
        out = await command(str(Path(sys.executable).parent / "ganggate"), "plan", "--snapshot", str(snapshot),
                            "-o", "json", *NEVER_STARVING)
    report = {g["gang"]: g for g in json.loads(out)["gangs"]}
    # The 8-GPU pods need whole nodes: the two the notebook left empty.
    assert report["default/pair"]["fits"]
    assert busy not in report["default/pair"]["nodes"] and len(report["default/pair"]["nodes"]) == 2
    # Then 2 GPUs are free in all: trio (3 x 4) waits, and says why.
    assert not report["default/trio"]["fits"]
    assert report["default/trio"]["why"] == (
        "GangUnschedulable: needs 4 nvidia.com/gpu on one node; the largest free is 2"
    )


# ---- topology, as the controller sees it with --topology-levels ----------------------------

RACK = "example.com/rack"


def test_topology_levels_make_the_plan_name_the_domain_and_bad_levels_are_refused(capsys, tmp_path) -> None:
    nodes = [make_node(name, gpus=8, labels={RACK: rack}) for name, rack in (("a1", "a"), ("a2", "a"), ("b1", "b"))]
    pods = [make_pod(f"w-{i}", namespace="ml", gang="w", pod_num=2, gpus=8) for i in range(2)]
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes + pods}))
    code, out, _ = run(capsys, "--snapshot", str(path), "-o", "json", "--topology-levels", RACK)
    assert code == 0
    (gang,) = json.loads(out)["gangs"]
    assert gang["fits"] and set(gang["placement"].values()) == {"a1", "a2"}  # the one rack the gang fits in
    assert gang["why"] == f"2 pods on 2 nodes in {RACK}=a"
    code, out, _ = run(capsys, "--snapshot", str(path), "-o", "json")
    assert json.loads(out)["gangs"][0]["why"] == "2 pods on 2 nodes"  # no levels: no domains
    code, out, err = run(capsys, "--snapshot", str(path), "--topology-levels", "not a key!")
    assert code == 2 and out == ""
    assert err == "ganggate plan: --topology-levels: topology_levels: 'not a key!' is not a node label key\n"


def test_gpus_published_as_dra_devices_are_planned_like_device_plugin_gpus(capsys, tmp_path) -> None:
    from tests.test_dra_core import GPU_CLASS, claimed, slice_for, template

    def kind(obj: dict, name: str) -> dict:
        return {"apiVersion": "resource.k8s.io/v1", "kind": name, **obj}

    pods = [claimed(make_pod(f"ddp-{i}", namespace="ml", gang="ddp", pod_num=3), resourceClaimTemplateName="two")
            for i in range(3)]
    wide = [claimed(make_pod(f"wide-{i}", namespace="ml", gang="wide", pod_num=5), resourceClaimTemplateName="two")
            for i in range(5)]
    items = [make_node("n0", gpus=0), make_node("n1", gpus=0), *pods, *wide, kind(GPU_CLASS, "DeviceClass"),
             kind(slice_for("n0", 4), "ResourceSlice"), kind(slice_for("n1", 4), "ResourceSlice"),
             kind(template("two", 2), "ResourceClaimTemplate")]
    snapshot = tmp_path / "dra.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    code, out, err = run(capsys, "--snapshot", str(snapshot), *NEVER_STARVING)
    assert code == 0 and err == ""
    assert out.splitlines()[0] == ("2 nodes (2 ready, 8 GPUs free on schedulable nodes), 8 pods; "
                                   "2 gated gangs, 1 would be released now")
    table = rows(out)
    assert table["ml/ddp"][:4] == ["waiting", "3/3", "6", "yes"]
    assert table["ml/wide"][:4] == ["waiting", "5/5", "10", "no"]
