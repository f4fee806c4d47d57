"""The gate controller's memory at 20,000 nodes / 100,000 pods, measured on the real process.

kubesim runs in a process of its own (`ganggate sim serve --load`: the cluster of bench_decide's
builder, 20,000 nodes of 8 GPUs, 40% partly used, 100,000 waiting pods in gangs, created through
its create pipeline). The controller (`ganggate controller` in a subprocess, on kubesim's
kubeconfig) lists and watches it, twice: as a standby replica (leader election on, the Lease held
by another replica: it syncs and holds the picture but runs no round) until its /readyz says it is
synced, and as the leader (--no-leader-election) until it has finished two decision rounds (its
/metrics: ganggate_decide_seconds_count). Each time its peak RSS (VmHWM) and RSS (VmRSS) are read
from /proc/PID/status, with the CPU time it used so far. Beside them: the same controller against
an empty kubesim (the interpreter and libraries alone: the idle baseline), and the bytes of JSON
its list calls are served (nodes + pods, page by page with the controller's page size). The
picture is the standby's peak - idle; what rounds add is the leader's peak - the standby's. Every
PATCH of a pod is refused by an injected fault (403), so releases stop at their dry run and every
controller run sees the same cluster (Events are still written).

--before DIR runs the controller of another checkout too (a worktree of an older commit, with
this checkout's kubesim), alternately with this one, --repeat times each.
Run: .venv/bin/python bench/bench_memory.py [--before /tmp/base-memory] (--help for a smaller cluster).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_decide import build

PAGE_SIZE = 500  # the controller's list page (controller/round/informer.py)
LEASE = ("ganggate-system", "ganggate-controller")  # the controller's default lease (controller/config.py)
MIB = 2**20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, description="Peak RSS of the gate controller on a large kubesim cluster.")
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(nodes=10, waiting_pods=20, timeout=120.0))
    parser.add_argument("--nodes", type=int, default=20000, help="nodes of 8 GPUs (default 20000)")
    parser.add_argument("--waiting-pods", type=int, default=100000, help="gated gang pods (default 100000)")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the cluster (default 7)")
    parser.add_argument("--before", metavar="DIR",
                        help="a checkout (e.g. `git worktree add /tmp/base-memory REV`) whose controller is "
                             "measured too, alternately with this one")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each controller (default 1)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds a controller may take to sync and finish its rounds (default 900)")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.waiting_pods < 1 or args.repeat < 1:
        parser.error("--nodes, --waiting-pods and --repeat must be at least 1")
    if args.before is not None and not (Path(args.before) / "ganggate" / "__init__.py").is_file():
        parser.error(f"--before {args.before}: not a ganggate checkout (no ganggate/__init__.py)")
    return args


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def write_cluster(path: Path, seed: int, nodes: int, waiting: int) -> tuple[int, int]:
    """The builder's nodes and pods, with their namespaces and priority classes first, as JSON
    Lines for --load. A pod names its PriorityClass: the Priority admission plugin refuses a
    spec.priority set by the client (plugin/pkg/admission/priority/admission.go)."""
    node_objects, pods = build(seed, nodes, waiting)
    namespaces = sorted({p["metadata"]["namespace"] for p in pods})
    priorities: set[int] = set()
    for pod in pods:
        value = pod["spec"].pop("priority", 0)
        if value:
            priorities.add(value)
            pod["spec"]["priorityClassName"] = f"priority-{value}"
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": LEASE[1], "namespace": LEASE[0]},
             "spec": {"holderIdentity": "another-replica", "leaseDurationSeconds": 3600,
                      "renewTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())}}
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE[0]}}) + "\n")
        out.write(json.dumps(lease) + "\n")  # a standby controller never leads here (see measure_controller)
        for name in namespaces:
            out.write(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}) + "\n")
        for value in sorted(priorities):
            out.write(json.dumps({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                  "metadata": {"name": f"priority-{value}"}, "value": value}) + "\n")
        for obj in node_objects:
            out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        for obj in pods:
            out.write(json.dumps(obj, separators=(",", ":")) + "\n")
    return len(node_objects), len(pods)


class Kubesim:
    """`ganggate sim serve` in its own process (this checkout's), without scheduler or kubelet."""

    def __init__(self, workdir: Path, load: Path | None, timeout: float) -> None:
        self.kubeconfig = workdir / ("kubeconfig-loaded" if load else "kubeconfig-empty")
        cmd = [sys.executable, "-m", "ganggate", "sim", "serve", "--port", "0", "--nodes", "0",
               "--no-scheduler", "--no-kubelet", "--kubeconfig-out", str(self.kubeconfig)]
        if load is not None:
            cmd += ["--load", str(load)]
        log = self.kubeconfig.with_suffix(".log")
        with log.open("w") as out:  # a file, not a pipe: nobody need drain it
            self.process = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                            stdout=out, stderr=subprocess.STDOUT)
        self.url = ""
        deadline = time.monotonic() + timeout
        while not self.url:
            found = re.search(r"kubesim serving (http://\S+)", log.read_text())
            if found:
                self.url = found.group(1)
            elif self.process.poll() is not None:
                raise RuntimeError(f"kubesim exited ({self.process.returncode}) before serving: {log.read_text()[-500:]}")
            elif time.monotonic() > deadline:
                raise RuntimeError("kubesim did not start in time")
            else:
                time.sleep(0.5)

    def request(self, method: str, path: str, body: object = None) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as response:
            return response.read()

    def listed_bytes(self, path: str) -> int:
        """Bytes of JSON a paged list returns, page by page as the controller's informer asks."""
        total, token = 0, ""
        while True:
            query = f"?limit={PAGE_SIZE}" + (f"&continue={urllib.request.quote(token)}" if token else "")
            body = self.request("GET", path + query)
            total += len(body)
            token = (json.loads(body).get("metadata") or {}).get("continue") or ""
            if not token:
                return total

    def stop(self) -> None:
        stop(self.process, 30)


def stop(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM, and SIGKILL if it has not exited within `grace` seconds."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rounds_done(port: int) -> int:
    """ganggate_decide_seconds_count on the controller's /metrics (0 until it answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return 0
    found = re.search(r"^ganggate_decide_seconds_count (\S+)$", text, re.M)
    return int(float(found.group(1))) if found else 0


def proc_status(pid: int) -> dict[str, int]:
    """VmHWM and VmRSS (bytes) of a process, from /proc/PID/status."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0]) * 1024
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def synced(port: int) -> bool:
    """The controller's /readyz no longer says its informers are not synced."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5):
            return True
    except urllib.error.HTTPError as exc:
        return b"not synced" not in exc.read()
    except OSError:
        return False


def measure_controller(code: Path, kubeconfig: Path, rounds: int, timeout: float) -> dict[str, float]:
    """Run the controller of a checkout until it has finished `rounds` rounds (0: as a standby
    replica, leader election on, until it has synced); its memory then."""
    port = free_port()
    cmd = [sys.executable, "-m", "ganggate", "controller", "--kubeconfig", str(kubeconfig), "--metrics-port", str(port)]
    if rounds:
        cmd.append("--no-leader-election")
    done = (lambda: rounds_done(port) >= rounds) if rounds else (lambda: synced(port))
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(cmd, cwd=code, env={**os.environ, "PYTHONPATH": str(code)},
                               stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while not done():
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"controller exited {process.returncode}: {log.read()[-2000:].decode()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"controller did not finish {rounds} rounds (0: sync) within {timeout:g}s")
            time.sleep(0.5)
        if not rounds:
            time.sleep(2.0)  # the last page's conversion and the relist's rebuild are done by now
        status = proc_status(process.pid)
        return {"peak": status["VmHWM"], "rss": status["VmRSS"], "cpu": cpu_seconds(process.pid)}
    finally:
        stop(process, 60)
        log.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    codes = {"this checkout": ROOT}
    if args.before:
        codes[f"before ({args.before})"] = Path(args.before).resolve()
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        work = Path(tmp)
        cluster = work / "cluster.jsonl"
        node_count, pod_count = write_cluster(cluster, args.seed, args.nodes, args.waiting_pods)
        started = time.monotonic()
        loaded = Kubesim(work, cluster, args.timeout)
        load_seconds = time.monotonic() - started
        empty = Kubesim(work, None, args.timeout)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in codes}
        standby: dict[str, list[dict[str, float]]] = {name: [] for name in codes}
        idle: dict[str, list[dict[str, float]]] = {name: [] for name in codes}
        try:
            # Releases stop at their dry run: the cluster stays the same for every run.
            loaded.request("POST", "/kubesim/faults", {"verb": "patch", "resource": "pods", "status": 403,
                                                       "count": 10**9})
            node_bytes = loaded.listed_bytes("/api/v1/nodes")
            pod_bytes = loaded.listed_bytes("/api/v1/pods")
            for _ in range(args.repeat):
                for name, code in codes.items():  # alternately: the same load for both
                    idle[name].append(measure_controller(code, empty.kubeconfig, 1, args.timeout))
                    standby[name].append(measure_controller(code, loaded.kubeconfig, 0, args.timeout))
                    results[name].append(measure_controller(code, loaded.kubeconfig, 2, args.timeout))
        finally:
            loaded.stop()
            empty.stop()
    json_bytes = node_bytes + pod_bytes
    print(f"load average {load_average()} on {os.cpu_count()} CPUs (two other engineers share the machine; "
          "memory figures do not depend on load)")
    print(f"cluster: {node_count} nodes x 8 GPUs, {pod_count} pods ({args.waiting_pods} waiting, gated, in gangs), "
          f"loaded into kubesim in {load_seconds:.0f} s")
    print(f"JSON the controller's lists are served: {json_bytes / MIB:.1f} MiB "
          f"(nodes {node_bytes / MIB:.1f} MiB, pods {pod_bytes / MIB:.1f} MiB, pages of {PAGE_SIZE})")
    print(f"{'controller':34s} {'idle peak':>9s} {'standby':>8s} {'picture':>8s} {'/JSON':>6s} {'leader':>8s} "
          f"{'- idle':>7s} {'/JSON':>6s} {'rounds add':>10s} {'CPU sync':>8s} {'CPU 2 rounds':>12s}")
    for name in codes:
        for run, ready, base in zip(results[name], standby[name], idle[name], strict=True):
            picture, whole = ready["peak"] - base["peak"], run["peak"] - base["peak"]
            print(f"{name:34s} {base['peak'] / MIB:7.0f} M {ready['peak'] / MIB:6.0f} M {picture / MIB:6.0f} M "
                  f"{picture / json_bytes:5.2f}x {run['peak'] / MIB:6.0f} M {whole / MIB:5.0f} M {whole / json_bytes:5.2f}x "
                  f"{(run['peak'] - ready['peak']) / MIB:8.0f} M {ready['cpu']:6.1f} s {run['cpu']:10.1f} s")
    print("peak RSS = VmHWM. idle peak: the leader against an empty cluster (interpreter and libraries); standby: "
          "synced, not leading (the picture = standby - idle); leader: after two rounds (the first releases "
          "every gang that fits at once, all refused at their dry run); rounds add = leader - standby")
    print(f"load average {load_average()}")


if __name__ == "__main__":
    main()
