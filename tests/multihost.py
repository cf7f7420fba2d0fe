"""A multi-host test bed on one Linux machine: "hosts" with their own network and clocks.

Each host is a network namespace (its own loopback and one address on a private bridge,
joined by a veth pair) whose processes run in a time namespace of their own, so its
``CLOCK_MONOTONIC`` is the machine's plus the host's offset (``unshare --time --monotonic``,
Linux >= 5.6). Two processes started on one host share its offset; two hosts' clocks differ by
exactly the difference of their offsets, which is the independent truth the clock arithmetic
of ``send.ray_actors`` is checked against.

``Bed`` makes the bridge, the namespaces and the links, starts processes on hosts
(:meth:`Bed.spawn`), tears a host down mid-run (:meth:`Bed.kill_host`: every process in its
namespace killed, its link removed, as a machine that loses power), and removes everything it
made in :meth:`Bed.close`, which a ``with`` block calls also when a test fails. Nothing outside
its own namespaces and its own bridge is touched. ``unavailable()`` says in one line why the
machine cannot host a bed (not root, no ``ip``/``unshare``, no time namespaces).

Ray across the hosts (:meth:`Bed.ray_head`, :meth:`Bed.ray_node`): small nodes (``--num-cpus``,
a 100 MB object store, no dashboard), each with its own temp dir, joined by the head's address.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["Bed", "Host", "unavailable"]

_OBJECT_STORE_BYTES = 100 * 1024 * 1024
_RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    # a lost node is declared dead after ~3 s, not Ray's default ~30 s (tests stay short)
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_AUTH_MODE": "disabled",  # the bed's nodes share no token file of their own
    "RAY_DEDUP_LOGS": "0",
}


def _ok(*cmd: str) -> bool:
    try:
        res = subprocess.run(cmd, capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


def unavailable() -> str | None:
    """Why no bed can be built here (one line), or None."""
    if sys.platform != "linux":
        return "multi-host bed: Linux network and time namespaces only"
    if os.geteuid() != 0:
        return "multi-host bed: needs root (network and time namespaces)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"multi-host bed: no {tool} command"
    if not _ok("unshare", "--time", "--monotonic", "5", "--fork", "true"):
        return "multi-host bed: time namespaces not allowed here (Linux >= 5.6, unshare --time)"
    if not _ok("unshare", "--net", "true"):
        return "multi-host bed: network namespaces not allowed here"
    return None


@dataclass(slots=True)
class Host:
    """One stand-in machine: a namespace, an address and a monotonic clock offset."""

    name: str
    netns: str
    addr: str
    offset_s: int
    veth: str


@dataclass
class Bed:
    """The bridge, the hosts and every process started on them (see the module doc)."""

    hosts: dict[str, Host] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)
    tag: str = ""
    bridge: str = ""
    subnet: str = ""
    head: str = ""  # the Ray head's address, once started
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tw-bed-")))

    @classmethod
    def build(cls, offsets_s: dict[str, int]) -> Bed:
        """Hosts named as ``offsets_s``'s keys, each with that monotonic offset, on a bridge."""
        bed = cls()
        n = os.getpid() % 200 + 20
        bed.tag, bed.bridge, bed.subnet = f"tw{n}", f"twbr{n}", f"10.251.{n}"
        try:
            bed._sh("ip", "link", "add", bed.bridge, "type", "bridge")
            bed._sh("ip", "addr", "add", f"{bed.subnet}.1/24", "dev", bed.bridge)
            bed._sh("ip", "link", "set", bed.bridge, "up")
            for i, (name, off) in enumerate(offsets_s.items()):
                bed._add_host(name, off, i)
        except BaseException:
            bed.close()
            raise
        return bed

    def _sh(self, *cmd: str) -> None:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.strip()}")

    def _add_host(self, name: str, offset_s: int, i: int) -> None:
        ns, veth = f"{self.tag}-{name}", f"{self.tag}v{i}"
        host = Host(name, ns, f"{self.subnet}.{10 + i}", offset_s, veth)
        self.hosts[name] = host
        self._sh("ip", "netns", "add", ns)
        self._link(host)

    def _link(self, host: Host) -> None:
        ns, veth = host.netns, host.veth
        self._sh("ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
        self._sh("ip", "link", "set", f"{veth}p", "netns", ns)
        self._sh("ip", "link", "set", veth, "master", self.bridge)
        self._sh("ip", "link", "set", veth, "up")
        inside = ("ip", "netns", "exec", ns)
        self._sh(*inside, "ip", "link", "set", "lo", "up")
        self._sh(*inside, "ip", "link", "set", f"{veth}p", "name", "eth0")
        self._sh(*inside, "ip", "addr", "add", f"{host.addr}/24", "dev", "eth0")
        self._sh(*inside, "ip", "link", "set", "eth0", "up")

    def argv(self, host: str, cmd: list[str]) -> list[str]:
        """``cmd`` as run on ``host``: in its network namespace, on its clock."""
        h = self.hosts[host]
        clock = ["unshare", "--time", "--monotonic", str(h.offset_s), "--fork", "--kill-child"]
        return ["ip", "netns", "exec", h.netns, *clock, *cmd]

    def spawn(self, host: str, cmd: list[str], *, log: str, **kw: Any) -> subprocess.Popen[bytes]:
        """Start ``cmd`` on ``host`` in a session of its own; output to ``root/log``."""
        out = (self.root / log).open("wb")
        self.logs.append(out)
        env = {**os.environ, **_RAY_ENV, **kw.pop("env", {})}
        proc = subprocess.Popen(
            self.argv(host, cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            **kw,
        )
        self.procs.append(proc)
        return proc

    def run(
        self, host: str, cmd: list[str], *, timeout_s: float
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` on ``host`` to its end; its output returned."""
        env = {**os.environ, **_RAY_ENV}
        return subprocess.run(
            self.argv(host, cmd),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env=env,
        )

    def ray_head(self, host: str, *, port: int = 6379) -> str:
        """A Ray head on ``host`` (no CPUs: it holds the coordinator, not actors); its address."""
        h = self.hosts[host]
        head = ["--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false"]
        self._ray_start(host, head)
        self.head = f"{h.addr}:{port}"
        return self.head

    def ray_node(self, host: str, head: str, *, cpus: int) -> None:
        """A Ray worker node on ``host`` joined to ``head`` with ``cpus`` CPUs."""
        self._ray_start(host, [f"--address={head}", f"--num-cpus={cpus}"])

    def _ray_start(self, host: str, args: list[str]) -> None:
        h = self.hosts[host]
        tmp = self.root / f"ray-{host}"
        tmp.mkdir(exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            *args,
            f"--node-ip-address={h.addr}",
            f"--object-store-memory={_OBJECT_STORE_BYTES}",
            "--disable-usage-stats",
            f"--temp-dir={tmp}",
            "--num-gpus=0",
        ]
        res = self.run(host, cmd, timeout_s=120)
        if res.returncode != 0:
            raise RuntimeError(f"ray start on {host}: {(res.stdout + res.stderr)[-2000:]}")

    def pids(self, host: str) -> list[int]:
        """Every process in ``host``'s network namespace."""
        res = subprocess.run(
            ["ip", "netns", "pids", self.hosts[host].netns],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return [int(p) for p in res.stdout.split()]

    def kill_host(self, host: str) -> None:
        """The machine loses power: every process on it killed, its link gone."""
        h = self.hosts[host]
        with contextlib.suppress(RuntimeError):
            self._sh("ip", "link", "del", h.veth)
        for pid in self.pids(host):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def revive_host(self, host: str, offset_s: int) -> None:
        """A torn-down host back on the bridge, its clock now at ``offset_s`` (a machine
        rebooted: every process started on it from now on runs in a new time namespace)."""
        h = self.hosts[host]
        h.offset_s = offset_s
        with contextlib.suppress(RuntimeError):  # a dead peer may have taken the link along
            self._sh("ip", "link", "del", h.veth)
        if _ok("ip", "netns", "exec", h.netns, "ip", "link", "show", "eth0"):
            self._sh("ip", "netns", "exec", h.netns, "ip", "link", "del", "eth0")
        self._link(h)

    def close(self) -> None:
        """Remove every process, namespace, link and the bridge this bed made."""
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for name in list(self.hosts):
            self.kill_host(name)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(self.pids(n) for n in self.hosts):
            time.sleep(0.1)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        for h in self.hosts.values():
            subprocess.run(["ip", "netns", "del", h.netns], capture_output=True, check=False)
        if self.bridge:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
        for f in self.logs:
            f.close()
        if not os.environ.get("TW_BED_KEEP"):  # TW_BED_KEEP=1 keeps the logs for a look
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Bed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
