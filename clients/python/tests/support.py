"""Test support: a real onceqd on an ephemeral port with a fresh temp data
dir (the binary from $ONCEQD, else ../../build/cmd/onceqd), and helpers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid
from pathlib import Path
from typing import Callable, Optional

HERE = Path(__file__).resolve().parent
PKG_ROOT = HERE.parent
REPO = PKG_ROOT.parent.parent
READY = "onceqd listening on "


def _die_with_parent() -> None:
    """Child side of Popen: SIGKILL this process if the test run dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort, Linux only
        pass


def onceqd_binary() -> str:
    path = os.environ.get("ONCEQD") or str(REPO / "build" / "cmd" / "onceqd")
    if not os.access(path, os.X_OK):
        raise unittest.SkipTest(f"no onceqd binary at {path} (set ONCEQD)")
    return path


class Server:
    """One onceqd process. ``stop()`` kills it by its own pid."""

    def __init__(self, *extra: str, tls: Optional[tuple[str, str]] = None) -> None:
        self.root = tempfile.mkdtemp(prefix="onceq-py-")
        self.data_dir = os.path.join(self.root, "data")
        self.log_path = os.path.join(self.root, "server.log")
        args = [onceqd_binary(), "--listen", "127.0.0.1:0", "--data-dir", self.data_dir,
                "--fsync", "none", "--log-level", "warn", *extra]
        if tls:
            args += ["--tls-cert", tls[0], "--tls-key", tls[1]]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._log, text=True,
                                     preexec_fn=_die_with_parent)
        line = self._read_ready_line(20.0)
        self.port = int(line.rsplit(":", 1)[1])
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        # Keep draining stdout so that the server never blocks on it.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def _read_ready_line(self, timeout: float) -> str:
        result: list[str] = []
        t = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        line = result[0].strip() if result else ""
        if not line.startswith(READY):
            self.stop()
            raise RuntimeError(f"onceqd did not start: {line!r}; log:\n{self.log_tail()}")
        return line

    def log_tail(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_until(pred: Callable[[], bool], timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


class ServerTestCase(unittest.TestCase):
    """One server per test class; each test uses its own topics."""

    server_args: tuple[str, ...] = ()

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = Server(*cls.server_args)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def client(self, **kw):
        import onceq

        c = onceq.Client(self.server.url, **kw)
        self.addCleanup(c.close)
        return c


class WorkerProcess:
    """A worker in its own Python process (tests/worker_proc.py), printing
    one JSON event per line; killed by its own pid."""

    def __init__(self, url: str, topic: str, group: str, owner: str, *args: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(PKG_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "worker_proc.py"), url, topic, group, owner, *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            preexec_fn=_die_with_parent,
        )
        self.events: list[dict] = []
        self.stderr = ""
        self._cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._cv:
                self.events.append(json.loads(line))
                self._cv.notify_all()

    def _read_err(self) -> None:
        self.stderr = self.proc.stderr.read()

    def wait_event(self, kind: str, timeout: float = 15.0) -> dict:
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for e in self.events:
                    if e["event"] == kind:
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {kind!r} event in {timeout}s; events {self.events}; stderr {self.stderr[-2000:]}")
                self._cv.wait(left)

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
