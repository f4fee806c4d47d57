"""The webhook and the gate controller in processes of their own, as on a cluster.

`ganggate sim up` starts each with its own command line (`ganggate webhook`, `ganggate
controller`), waits for its /readyz as a kubelet's readiness probe would, and on the way out
stops it with SIGTERM (it finishes cleanly: the controller gives up its lease) before kubesim
stops. Each has its own CPU, as its pod has on a cluster: kubesim's API server does not pay for
the controller's watch handling and API calls, nor the webhook for its reviews."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: How long a part may take to answer its /readyz (imports, informers synced, lease taken).
READY_SECONDS = 120.0
#: How long a part may take to stop after SIGTERM (the controller's --shutdown-grace is 10 s).
STOP_SECONDS = 20.0


class PartError(Exception):
    """A part that could not start or stopped, said in one line."""


@dataclass
class Part:
    """One child process and the plain-HTTP /readyz that says it is ready."""

    name: str  # as a user names it: "webhook", "gate controller"
    process: asyncio.subprocess.Process
    ready_url: str

    def stopped(self) -> str | None:
        """Why the part is gone (its exit status), or None while it runs."""
        code = self.process.returncode
        if code is None:
            return None
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        return f"the {self.name} stopped ({how}; its log is above)"


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's pick for port 0), for a part to bind."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_free(port: int, host: str = "127.0.0.1") -> OSError | None:
    """None if `port` can be bound on `host` now, else the error binding it gives."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc
    return None


def ganggate_command(log_level: str, *args: str) -> list[str]:
    """`ganggate --log-level L ARGS...` with this interpreter."""
    return [sys.executable, "-m", "ganggate", "--log-level", log_level, *args]


async def start(name: str, argv: list[str], ready_url: str) -> Part:
    """Start a part; its log goes where sim up's does; what it prints for a user starting it by hand
    (`ganggate webhook`'s "listening on" line) is dropped: sim up's banner says where each part is.
    It gets SIGTERM if sim up dies (Linux)."""
    # A session of its own: Ctrl-C in a terminal reaches sim up alone, which stops the parts in
    # order (the controller first, while the API server still answers its lease release).
    process = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                   stdout=asyncio.subprocess.DEVNULL, start_new_session=True,
                                                   preexec_fn=_end_with_parent())
    log.info("%s started (pid %d)", name, process.pid)
    return Part(name, process, ready_url)


async def until_ready(part: Part, stop: asyncio.Event, timeout: float = READY_SECONDS) -> bool:
    """Wait until the part's /readyz answers 200; False if `stop` is set first. Raises PartError if
    the part exits or is not ready in time."""
    import aiohttp

    deadline = asyncio.get_running_loop().time() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while True:
            if (why := part.stopped()) is not None:
                raise PartError(why)
            if stop.is_set():
                return False
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(part.ready_url) as response:
                    if response.status == 200:
                        return True
            if asyncio.get_running_loop().time() > deadline:
                raise PartError(f"the {part.name} was not ready after {timeout:.0f} s ({part.ready_url})")
            await asyncio.sleep(0.05)


async def stop_part(part: Part, timeout: float = STOP_SECONDS) -> None:
    """SIGTERM, then wait for a clean stop; SIGKILL after `timeout`."""
    if part.process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            part.process.terminate()
        try:
            await asyncio.wait_for(part.process.wait(), timeout)
        except TimeoutError:
            log.warning("the %s did not stop within %.0f s of SIGTERM: killing it", part.name, timeout)
            with contextlib.suppress(ProcessLookupError):
                part.process.kill()
            await part.process.wait()


def _end_with_parent() -> Callable[[], None] | None:
    """On Linux, a pre-exec hook asking the kernel to SIGTERM the child when sim up dies (even by
    SIGKILL), so no part outlives its cluster; elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork, not in the child
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return hook
