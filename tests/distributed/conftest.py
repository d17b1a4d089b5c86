"""Fixtures of the coordinator's tests: every test that takes ``db_url`` runs on SQLite and on PostgreSQL.

PostgreSQL: ``$VKBLAS_TEST_POSTGRES`` is an admin URL of a running server (``.ci/run`` installs and starts one);
each test gets a database of its own, dropped afterwards. Without that variable the PostgreSQL cases are skipped
with the reason — unless ``$VKBLAS_REQUIRE_POSTGRES=1`` (set by ``.ci/run``), then they fail: CI that asked for
PostgreSQL must prove both databases.

Everything listens on 127.0.0.1 only, on free ports; every process a test starts is killed at its end.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("VKBLAS_DATA") or REPO / ".." / "shared" / "data")
needs_data = pytest.mark.skipif(not (DATA / "mnist").is_dir(), reason=f"no MNIST files in {DATA}")
PG_ADMIN = os.environ.get("VKBLAS_TEST_POSTGRES", "")
PG_REQUIRED = os.environ.get("VKBLAS_REQUIRE_POSTGRES") == "1"


def _pg_database() -> Iterator[str]:
    import psycopg

    if not PG_ADMIN:
        if PG_REQUIRED:
            pytest.fail("VKBLAS_REQUIRE_POSTGRES=1 but VKBLAS_TEST_POSTGRES (an admin URL) is not set")
        pytest.skip("PostgreSQL not configured: set VKBLAS_TEST_POSTGRES=postgresql://user@host:port/postgres")
    name = f"vkblas_test_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as e:
        pytest.fail(f"PostgreSQL at {PG_ADMIN} is not reachable: {e}")
    base = PG_ADMIN.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "coordinator.db")
    else:
        yield from _pg_database()


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from _pg_database()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["VKBLAS_DATA"] = str(DATA)
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Procs:
    """Processes a test started: a coordinator (``serve``) and workers (``join``); all killed at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, args: list[str], log: str) -> subprocess.Popen:
        out = open(self.tmp / log, "ab")  # noqa: SIM115 - closed with the process below
        cmd = [sys.executable, "-m", "vkblas", *args]
        # a session of its own: uvicorn's worker processes are killed with their parent (os.killpg)
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env(), start_new_session=True)
        p.log = self.tmp / log  # type: ignore[attr-defined]
        self.procs.append(p)
        return p

    def serve(
        self, db: str, *run_args: str, workers: int = 1, log: str = "serve.log", dataset: str = "mnist"
    ) -> subprocess.Popen:
        args = ["distributed", "serve", dataset, "--db", db, "--store", str(self.tmp / "store"), "--port",
                str(self.port), "--workers", str(workers), *run_args]  # fmt: skip
        p = self.start(args, log)
        self.wait_ready(p)
        return p

    def wait_ready(self, p: subprocess.Popen, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise AssertionError(f"coordinator exited with {p.returncode}:\n{p.log.read_text()[-3000:]}")  # type: ignore[attr-defined]
            try:
                if httpx.get(f"{self.url}/v1/status", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"coordinator not ready after {timeout} s:\n{p.log.read_text()[-3000:]}")  # type: ignore[attr-defined]

    def join(self, name: str, *extra: str) -> subprocess.Popen:
        args = ["distributed", "join", "--server", self.url, "--name", name, "--quiet", "--retry-for", "120",
                "--cache", str(self.tmp / f"cache-{name}"), *extra]  # fmt: skip
        return self.start(args, f"join-{name}.log")

    def status(self) -> dict:
        return httpx.get(f"{self.url}/v1/status", timeout=10).json()

    def wait(self, what, timeout: float = 240, every: float = 0.5):  # type: ignore[no-untyped-def]
        """Poll ``what(status)`` until it is truthy; fail with the logs after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.status()
                if what(last):
                    return last
            except httpx.HTTPError:
                pass
            time.sleep(every)
        logs = "\n".join(f"--- {p.log.name}\n{p.log.read_text()[-2000:]}" for p in self.procs)  # type: ignore[attr-defined]
        raise AssertionError(f"condition not met in {timeout} s; last status {last}\n{logs}")

    @staticmethod
    def kill(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        """``kill -9`` a process this test started, with the processes it started (its group)."""
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGKILL:
            p.wait(timeout=30)

    def kill_all(self) -> None:
        for p in self.procs:
            self.kill(p) if p.poll() is None else None
        for p in self.procs:
            try:  # an exited uvicorn parent may leave its group behind
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.kill_all()


class _PortalTransport(httpx.BaseTransport):
    """The test client's transport, with the closed-stream error its portal raises when two threads' requests race
    (anyio's ``ClosedResourceError`` while a body is read) given as the ``httpx.ReadError`` a dropped connection
    gives on a real network, which the worker's client retries. Only the in-process harness needs it: the loopback
    tests run real servers."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        import anyio

        try:
            response = self.inner.handle_request(request)
            response.read()
        except anyio.ClosedResourceError as e:
            raise httpx.ReadError(f"test client: {e!r}", request=request) from e
        return response


class InProcess:
    """A coordinator app in this process (no applier thread: tests step the applier themselves), a test client
    and a helper to make workers."""

    def __init__(
        self, db: str, tmp: Path, settings: dict | None = None, peer: tuple[str, int] = ("testclient", 50000), **spec
    ) -> None:
        from starlette.testclient import TestClient

        from vkblas.distributed.coordinator.app import create_app
        from vkblas.distributed.coordinator.config import RunSpec, ServeSettings
        from vkblas.distributed.coordinator.serve import prepare

        opts = {
            "limit": 600,
            "shard_samples": 250,
            "epochs": 1,
            "batch_size": 64,
            "unit_seconds": 0.5,
            "algorithm": "async",
            # the protocol's tests see every result applied; validation's own tests (test_validation.py) turn it on
            "validate_fraction": 0.0,
            "trust_after": 0,
        }
        opts.update(spec)
        # no applier thread unless a test asks for one (``settings={"applier": True}``)
        self.settings = ServeSettings(**{"db": db, "store": str(tmp / "store"), "applier": False, "data": str(DATA),
                                         **(settings or {})})  # fmt: skip
        self.spec = RunSpec(**opts)  # type: ignore[arg-type]
        prepare(self.settings, self.spec)
        self.app = create_app(self.settings)
        self.tc = TestClient(self.app, base_url="http://testserver", client=peer)
        self.tc.__enter__()
        self.ctx = self.app.state.ctx
        self.tmp = tmp

    def applier(self, **kw: object):  # type: ignore[no-untyped-def]
        from vkblas.distributed.coordinator.applier import Applier

        return Applier(self.ctx.db, self.ctx.store, self.ctx.spec, data=str(DATA), **kw)  # type: ignore[arg-type]

    def client(self, transport=None):  # type: ignore[no-untyped-def]
        from vkblas.distributed.worker.client import Client

        return Client("http://testserver", transport=transport or _PortalTransport(self.tc._transport), retry_for=5.0)

    def register(self, name: str = "w", user_token: str | None = None, device_class: str = "") -> dict[str, str]:
        headers = {"authorization": f"Bearer {user_token}"} if user_token else {}
        body = {"name": name, "device": "cpu", "device_class": device_class}
        r = self.tc.post("/v1/workers", json=body, headers=headers)
        assert r.status_code == 200, r.text
        return {"authorization": f"Bearer {r.json()['token']}"}

    def admin(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.settings.admin_token_path.read_text().strip()}"}

    def close(self) -> None:
        self.tc.__exit__(None, None, None)


@pytest.fixture
def coord(db_url: str, tmp_path: Path) -> Iterator[InProcess]:
    c = InProcess(db_url, tmp_path)
    try:
        yield c
    finally:
        c.close()
