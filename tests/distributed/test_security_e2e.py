"""The public coordinator over loopback, for real (uvicorn, CLI processes): HTTPS with ``--tls-cert/--tls-key``
(a self-made certificate, trusted by the clients through ``--ca-cert``), the client's address taken from
X-Forwarded-For only because the peer is a ``--trusted-proxy``, the organiser's CLI, a user's account and a worker
that credits it."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .conftest import Procs, _env, needs_data

pytestmark = [needs_data, pytest.mark.timeout(300)]


def _certificate(tmp: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test's certificate (apt-get install openssl)")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vkblas", "distributed", *args], capture_output=True, text=True,
                          env=_env(), timeout=120)  # fmt: skip


def test_https_proxy_addresses_and_the_organisers_cli(tmp_path: Path, procs: Procs):
    cert, key = _certificate(tmp_path)
    url = f"https://127.0.0.1:{procs.port}"
    admin_file = tmp_path / "admin-token"
    p = procs.start(
        ["distributed", "serve", "mnist", "--db", str(tmp_path / "c.db"), "--store", str(tmp_path / "store"),
         "--port", str(procs.port), "--limit", "1000", "--shard-samples", "500", "--algorithm", "diloco",
         "--inner-steps", "2", "--batch-size", "32", "--tls-cert", str(cert), "--tls-key", str(key),
         "--trusted-proxy", "127.0.0.1", "--admin-token-file", str(admin_file)],
        "serve.log",
    )  # fmt: skip
    https = httpx.Client(base_url=url, verify=ssl.create_default_context(cafile=str(cert)), timeout=10)
    deadline = time.monotonic() + 120
    while True:
        assert p.poll() is None, p.log.read_text()[-2000:]  # type: ignore[attr-defined]
        try:
            if https.get("/healthz").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the HTTPS coordinator did not start"
        time.sleep(0.3)
    with pytest.raises(httpx.HTTPError):  # plain HTTP is not served, and the certificate is not the system's
        httpx.get(f"http://127.0.0.1:{procs.port}/healthz", timeout=5)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz", timeout=5)
    assert admin_file.stat().st_mode & 0o077 == 0  # the organiser's eyes only

    made = _cli("user", "--server", url, "--ca-cert", str(cert), "carol")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    worker = procs.start(["distributed", "join", "--server", url, "--ca-cert", str(cert), "--name", "carol-pc",
                          "--user-token", token, "--max-units", "1", "--quiet", "--cache", str(tmp_path / "cache")],
                         "join.log")  # fmt: skip
    assert worker.wait(timeout=180) == 0, worker.log.read_text()[-2000:]  # type: ignore[attr-defined]
    # the proxy (here: the test, from 127.0.0.1) says whom it forwards; an untrusted peer could not
    reg = https.post("/v1/workers", json={"name": "behind-proxy", "device": "cpu"},
                     headers={"x-forwarded-for": "6.6.6.6, 203.0.113.5"})  # fmt: skip
    assert reg.status_code == 200, reg.text
    listed = _cli("admin", "--server", url, "--ca-cert", str(cert), "--token-file", str(admin_file), "workers")
    assert listed.returncode == 0, listed.stderr
    by_name = {w["name"]: w for w in json.loads(listed.stdout)}
    assert by_name["behind-proxy"]["address"] == "203.0.113.5" and by_name["carol-pc"]["user"] == "carol"
    assert by_name["carol-pc"]["address"] == "127.0.0.1"
    paused = _cli("admin", "--server", url, "--ca-cert", str(cert), "--token-file", str(admin_file), "pause",
                  "--reason", "maintenance")  # fmt: skip
    assert paused.returncode == 0 and "paused" in paused.stdout, paused.stderr
    assert https.get("/v1/status").json()["state"] == "paused"
    wid = by_name["behind-proxy"]["worker_id"]
    banned = _cli("admin", "--server", url, "--ca-cert", str(cert), "--token-file", str(admin_file), "ban",
                  str(wid), "--reason", "testing")  # fmt: skip
    assert banned.returncode == 0 and json.loads(banned.stdout)["banned"] == "testing"
    me = https.get("/v1/workers/me", headers={"authorization": f"Bearer {reg.json()['token']}"}).json()
    assert me["name"] == "behind-proxy"
    assert https.post("/v1/leases", headers={"authorization": f"Bearer {reg.json()['token']}"}).status_code == 403
    page = https.get("/")
    assert page.status_code == 200 and "dashboard.js" in page.text
    https.close()
