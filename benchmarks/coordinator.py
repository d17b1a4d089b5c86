"""The coordinator on loopback: a real ``vkblas distributed serve`` and ``join`` processes (BENCHMARKS.md).

Sections (``--sections``, all by default):

* ``scaling``: 1, 2, 3, 4 workers (``--workers``) on the same run: samples/s, speedup over one worker, idle % of
  each worker, bytes on the wire per accepted sample (both ways, counted in each worker's transport), and the
  coordinator's CPU time per applied update (its applier thread alone, and the whole serving process).
* ``dropout``: the same run twice with the most workers, once clean and once with half of them ``kill -9``-ed
  when a third of the samples are handed out: final test accuracy side by side.
* ``traffic``: per-step ``sync`` fp32 vs ``diloco`` fp32 vs ``diloco`` int8 with ``--traffic-workers`` workers:
  the bytes each worker sent until the test accuracy first reached ``--target`` (the same accuracy for all), and
  the wall time to it, on plain loopback and through a simulated ``--uplink-mbit`` uplink (a token bucket in each
  worker's transport). A run stops at the target, the end of its samples or ``--time-cap`` seconds.

``--overlap off,on`` runs each diloco case twice, with the round barrier and with overlapped rounds (a worker
leases one unit ahead of the open round), side by side; ``on`` or ``off`` alone picks one (default: serve's).

Workers are cpu processes by default; ``--devices cpu,vulkan:0`` cycles through a list (worker i gets device i mod
len), and ``--threads`` sets each worker's BLAS/OpenMP threads. Example (the H200 machine)::

    PYTHONPATH=src python benchmarks/coordinator.py --devices vulkan:0,cpu,cpu,cpu --threads 4 --json out.json

The clock of a run starts when every worker has registered and a unit is out (a worker still importing is not
scaling). The scaling table's samples/s, speedup, idle % and coordinator CPU per update are the *steady* figures,
after the first moment every worker has ``WARM_UNITS`` units done (its start-up, the dataset download and the units
that calibrate its speed lie before): samples/s from the first model version applied after it to the last one
(rounds are applied whole, so a span that ends mid-round would drop that round's work), idle as the difference of
each worker's own clocks from it to the end of the run. "idle % (whole run)" is each worker's idle over its whole
life, start-up included.

``--preset h200`` is issue 11's figures on the H200 machine in one bounded command: full MNIST, scaling runs of 20
epochs cut at ``--time-cap 35`` s (a capped run's samples/s is still a rate; its accuracy is the model's at the cap;
no run ends in a short last round), DiLoCo units of up to 500 inner steps (so serve's ``--unit-seconds`` sizes
them, not the cap), in three stages: diloco and async with 1, 2, 3 cpu workers of 4 BLAS
threads; diloco on ``vulkan:0`` alone and ``vulkan:0`` + one cpu worker; the dropout pair (5 epochs, to the end) with
4 cpu workers of 3 threads. Ten runs of at most 35 s plus each one's start-up (~10 s): about 8 minutes. Flags given
with it (``--epochs``, ``--time-cap``, ...) override its values.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: a worker's first units warm it up and calibrate its speed (the coordinator's RateMeter: one unit of warm-up, two
#: of calibration); the steady figures start once every worker is past them
WARM_UNITS = 3
POLL_S = 0.25  # how often a run's status is read (the steady span's ends are known to within this)

#: --preset NAME: (the flags' values, then the stages: a section with the values it overrides)
PRESETS: dict[str, tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]] = {
    "h200": (
        # H up to 500 (DiLoCo's): the units' length is then --unit-seconds of each worker's speed; with the cap
        # of 20-50 a fast cpu worker's MNIST unit was ~0.25-0.6 s and the round barrier dominated.
        # Scaling runs of 20 epochs are cut by the time cap (no run ends in a short last round); the dropout pair
        # runs to the end, so that its final accuracies compare
        {"epochs": 20, "time_cap": 35.0, "limit": 0, "inner_steps": 500},
        [
            ("scaling", {"algorithms": "diloco,async", "workers": "1,2,3", "devices": "cpu", "threads": 4}),
            ("scaling", {"algorithms": "diloco", "workers": "1,2", "devices": "vulkan:0,cpu", "threads": 4}),
            ("dropout", {"algorithms": "diloco", "workers": "4", "devices": "cpu", "threads": 3, "epochs": 5}),
        ],
    ),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its children that were waited for (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")


class Run:
    """One coordinator and its workers in a temporary directory; everything is killed at the end."""

    def __init__(self, args: argparse.Namespace, serve_args: list[str], n: int, *, uplink: float | None = None) -> None:
        self.args, self.n = args, n
        self.tmp = Path(tempfile.mkdtemp(prefix="vkblas-coord-bench-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
        if args.data:
            self.env["VKBLAS_DATA"] = args.data
        self.procs: list[subprocess.Popen] = []
        serve = ["distributed", "serve", "mnist", "--db", str(self.tmp / "c.db"), "--store", str(self.tmp / "store"),
                 "--port", str(self.port), *serve_args]  # fmt: skip
        self.server = self._start(serve, "serve.log", self.env)
        self._ready()
        self.workers = []
        for i in range(n):
            env = dict(self.env)
            if args.threads:
                for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
                    env[k] = str(args.threads)
            device = args.devices[i % len(args.devices)]
            cmd = ["distributed", "join", "--server", self.url, "--name", f"w{i}", "--device", device, "--quiet",
                   "--cache", str(self.tmp / f"cache{i}")]  # fmt: skip
            if uplink:
                cmd += ["--uplink-mbit", str(uplink)]
            self.workers.append(self._start(cmd, f"w{i}.log", env))

    def _start(self, args: list[str], log: str, env: dict[str, str]) -> subprocess.Popen:
        out = open(self.tmp / log, "ab")  # noqa: SIM115 - the process owns it
        p = subprocess.Popen([sys.executable, "-m", "vkblas", *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)  # fmt: skip
        self.procs.append(p)
        return p

    def _ready(self) -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                raise RuntimeError(f"coordinator exited: {(self.tmp / 'serve.log').read_text()[-2000:]}")
            try:
                httpx.get(f"{self.url}/v1/status", timeout=2).raise_for_status()
                return
            except httpx.HTTPError:
                time.sleep(0.3)
        raise RuntimeError("coordinator did not start")

    def status(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/v1/status", timeout=30).json()

    def follow(self, *, stop_at: float | None = None, kill_half_at: float | None = None) -> dict[str, Any]:
        """Poll until the run finishes, reaches accuracy ``stop_at`` or the time cap; a timeline of
        (seconds, bytes sent by workers, bytes received, test accuracy)."""
        # the clock starts when every worker is in and a unit is out: a worker still importing is not scaling
        deadline = time.monotonic() + 180
        while (st := self.status())["samples_leased"] == 0 or len(st["workers"]) < self.n:
            dead = [p for p in self.workers if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join((self.tmp / f"w{i}.log").read_text()[-1500:] for i in range(self.n))
                raise RuntimeError(f"{len(st['workers'])} of {self.n} workers joined: {logs}")
            time.sleep(0.05)
        t0, cpu0, timeline, killed = time.monotonic(), cpu_seconds(self.server.pid), [], False
        applied0, accepted0 = st["samples_applied"], st["accepted"]
        warm: dict[str, Any] | None = None  # the first poll at which every worker is past its calibration units
        while True:
            st = self.status()
            t = time.monotonic() - t0
            acc = st["test"]["accuracy"] if st["test"] else 0.0
            sent, received = (sum(w[k] for w in st["workers"]) for k in ("bytes_sent", "bytes_received"))
            timeline.append((t, sent, received, acc))
            if warm is None and all(w["units_done"] >= WARM_UNITS for w in st["workers"]):
                warm = {"t": t, "samples_applied": st["samples_applied"], "accepted": st["accepted"],
                        "cpu": cpu_seconds(self.server.pid), "applied": [],
                        "workers": {w["name"]: (w["wall_s"], w["idle_s"]) for w in st["workers"]}}  # fmt: skip
            elif warm is not None:
                last = warm["applied"][-1][1] if warm["applied"] else warm["samples_applied"]
                if st["samples_applied"] > last:  # a new version: its time as this poll saw it
                    warm["applied"].append((t, st["samples_applied"], st["accepted"], cpu_seconds(self.server.pid)))
            if kill_half_at is not None and not killed and st["samples_leased"] >= kill_half_at * st["samples_total"]:
                for p in self.workers[: self.n // 2]:
                    os.killpg(p.pid, signal.SIGKILL)
                killed = True
            if st["state"] == "finished" or (stop_at is not None and acc >= stop_at) or t > self.args.time_cap:
                st["wall_s"], st["timeline"] = t, timeline
                st["coordinator_cpu_s"] = cpu_seconds(self.server.pid) - cpu0
                st["samples_timed"], st["updates_timed"] = st["samples_applied"] - applied0, st["accepted"] - accepted0
                st["steady"] = steady_window(warm, st, t, cpu_seconds(self.server.pid))
                return st
            time.sleep(POLL_S)

    def close(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def steady_window(warm: dict[str, Any] | None, st: dict[str, Any], t: float, cpu: float) -> dict[str, Any] | None:
    """Figures over the steady part of a run, after the first poll at which every worker had ``WARM_UNITS`` units
    done (start-up, the dataset download and the calibration units lie before). Samples/s is counted from the first
    model version applied after that poll to the last one applied (as first seen by a poll): samples are applied a
    round at a time, so a span that ended mid-round would leave out that round's work (a unit of 3 s is a sixth of
    a 20 s span). Idle per worker is the difference of its own reported clocks (``idle_s`` / ``wall_s``) from that
    poll to the end. None if the run ended first."""
    if warm is None or t - warm["t"] <= 0:
        return None
    idle = {}
    for w in st["workers"]:
        wall0, idle0 = warm["workers"].get(w["name"], (0.0, 0.0))
        span = w["wall_s"] - wall0
        idle[w["name"]] = (w["idle_s"] - idle0) / span if span > 0 else None
    if len(warm["applied"]) >= 2:
        (t0, s0, a0, c0), (t1, s1, a1, c1) = warm["applied"][0], warm["applied"][-1]
    else:  # fewer than two versions after warm-up: from the warm-up poll to the end
        t0, s0, a0, c0 = warm["t"], warm["samples_applied"], warm["accepted"], warm["cpu"]
        t1, s1, a1, c1 = t, st["samples_applied"], st["accepted"], cpu
    return {
        "from_s": t0,
        "seconds": t1 - t0,
        "samples": s1 - s0,
        "updates": a1 - a0,
        "coordinator_cpu_s": c1 - c0,
        "idle_fraction": idle,
    }


def devices_of(args: argparse.Namespace, n: int) -> str:
    """The workers' devices as the tables name them: ``cpu x3``, ``vulkan:0 + cpu``."""
    names = [args.devices[i % len(args.devices)] for i in range(n)]
    parts = [f"{d} x{names.count(d)}" if names.count(d) > 1 else d for d in dict.fromkeys(names)]
    return " + ".join(parts)


def run_args(args: argparse.Namespace, *extra: str, epochs: int | None = None) -> list[str]:
    base = ["--epochs", str(epochs or args.epochs), "--eval-seconds", str(args.eval_seconds)]
    if args.unit_seconds:
        base += ["--unit-seconds", str(args.unit_seconds)]
    if args.limit:
        base += ["--limit", str(args.limit)]
    shard = args.shard_samples or (min(10_000, args.limit) if args.limit else 0)
    if shard:
        base += ["--shard-samples", str(shard)]
    if not args.public:
        # equal workers of one organiser on loopback: no redundant copies (a lone worker's first results would
        # wait for a second worker to check them) and no rate limits (every worker has the address 127.0.0.1)
        base += ["--validate-fraction", "0", "--trust-after", "0", "--rate-per-address", "0", "--rate-per-token", "0"]
    return base + list(extra)


def variants(args: argparse.Namespace, algorithm: str) -> list[tuple[str, list[str]]]:
    """The runs of ``algorithm`` to make: (its label in the tables, its serve flags); diloco once per ``--overlap``
    value (serve's default if none)."""
    if algorithm != "diloco":
        return [(algorithm, ["--algorithm", algorithm])]
    flags = ["--algorithm", "diloco", *(["--inner-steps", str(args.inner_steps)] if args.inner_steps else [])]
    if not args.overlap:
        return [("diloco", flags)]
    return [(f"diloco overlap {v}", [*flags, "--overlap" if v == "on" else "--no-overlap"]) for v in args.overlap]


def scaling(args: argparse.Namespace, results: dict[str, Any]) -> None:
    rows = []
    for label, flags in (v for algorithm in args.algorithms for v in variants(args, algorithm)):
        base = None
        for n in args.workers:
            r = Run(args, run_args(args, *flags), n)
            try:
                st = r.follow()
            finally:
                r.close()
            steady = st["steady"]
            if steady is None:  # the run ended before every worker was past its calibration: the whole run
                steady = {"seconds": st["wall_s"], "samples": st["samples_timed"], "updates": st["updates_timed"],
                          "coordinator_cpu_s": st["coordinator_cpu_s"],
                          "idle_fraction": {w["name"]: w["idle_fraction"] for w in st["workers"]}}  # fmt: skip
            rate = steady["samples"] / steady["seconds"]
            base = base or rate
            upd = max(steady["updates"], 1)
            wire = sum(w["bytes_sent"] + w["bytes_received"] for w in st["workers"]) / max(st["samples_applied"], 1)
            by_name = sorted(st["workers"], key=lambda w: w["name"])
            idle = " ".join("-" if (f := steady["idle_fraction"][w["name"]]) is None else f"{100 * f:.0f}"
                            for w in by_name)  # fmt: skip
            whole = " ".join(f"{100 * w['idle_fraction']:.0f}" for w in by_name)
            rows.append([label, devices_of(args, n), f"{rate:,.0f}", f"{rate / base:.2f}x", idle, whole,
                         f"{wire / 1e3:.1f}",
                         f"{1e3 * st['apply_cpu_s_per_update']:.1f}", f"{1e3 * steady['coordinator_cpu_s'] / upd:.1f}",
                         f"{100 * st['test']['accuracy']:.2f}"])  # fmt: skip
            kept = {k: v for k, v in st.items() if k != "evaluations"}
            results.setdefault("scaling", []).append({"run": label, **kept})
    header = ["algorithm", "workers", "samples/s", "speedup", "idle % per worker", "idle % (whole run)",
              "wire kB/sample", "applier ms/update", "coordinator CPU ms/update", "test acc %"]  # fmt: skip
    results["tables"].append(print_table("scaling (loopback)", header, rows))


def dropout(args: argparse.Namespace, results: dict[str, Any]) -> None:
    n, rows = max(args.workers), []
    for name, flags in variants(args, args.algorithms[0]):
        for label, kill in (("clean", None), ("50% killed at 1/3", 1 / 3)):
            r = Run(args, run_args(args, *flags, "--lease-seconds", "5"), n)
            try:
                st = r.follow(kill_half_at=kill)
            finally:
                r.close()
            acc = f"{100 * st['test']['accuracy']:.2f}"
            rows.append([name, label, devices_of(args, n), acc, st["accepted"], st["stale"], f"{st['wall_s']:.0f}"])
            kept = {k: v for k, v in st.items() if k != "evaluations"}
            results.setdefault("dropout", []).append({"run": f"{name}, {label}", **kept})
    header = ["algorithm", "run", "workers", "final test acc %", "accepted", "stale", "wall s"]
    results["tables"].append(print_table("dropout", header, rows))


def traffic(args: argparse.Namespace, results: dict[str, Any]) -> None:
    diloco = ["--algorithm", "diloco", "--inner-steps", str(args.inner_steps or 20)]
    cases = [("sync fp32 (per step)", ["--algorithm", "sync"]), ("diloco fp32", diloco),
             ("diloco int8", [*diloco, "--codec", "int8"])]  # fmt: skip
    rows = []
    for label, extra in cases:
        row: list[Any] = [label]
        for uplink in (None, args.uplink_mbit):
            r = Run(args, run_args(args, *extra, epochs=args.traffic_epochs), args.traffic_workers, uplink=uplink)
            try:
                st = r.follow(stop_at=args.target)
            finally:
                r.close()
            reached = next(((t, sent, got) for t, sent, got, a in st["timeline"] if a >= args.target), None)
            acc = max(a for *_, a in st["timeline"])
            if uplink is None:
                per_worker = reached[1] / args.traffic_workers if reached else None
                row += ["-" if per_worker is None else f"{per_worker / 1e6:.2f}", f"{100 * acc:.2f}"]
            row.append(f"{reached[0]:.0f}" if reached else f">{st['wall_s']:.0f}")
            results.setdefault("traffic", []).append({"case": label, "uplink_mbit": uplink, "reached": reached,
                                                      "best_accuracy": acc, "timeline": st["timeline"]})  # fmt: skip
        rows.append(row)
    base = next((float(r[1]) for r in rows if r[1] != "-"), None)
    for r in rows:
        r.insert(2, "-" if r[1] == "-" or base is None else f"{base / float(r[1]):.0f}x")
    header = ["algorithm", f"MB sent per worker to {100 * args.target:g}%", "less than sync", "best acc %",
              "s to target (loopback)", f"s to target ({args.uplink_mbit:g} Mbit/s up)"]  # fmt: skip
    results["tables"].append(print_table(f"traffic ({args.traffic_workers} workers)", header, rows))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default=None, help="a bounded set of runs (see the top)")
    p.add_argument("--sections", default="scaling,dropout,traffic")
    p.add_argument("--workers", default="1,2,3,4", help="worker counts of the scaling section")
    p.add_argument("--algorithms", default="diloco,async", help="algorithms of the scaling section (first: dropout)")
    p.add_argument("--devices", default="cpu", help="comma-separated devices, cycled over the workers")
    p.add_argument("--threads", type=int, default=None, help="BLAS/OpenMP threads per worker")
    p.add_argument("--limit", type=int, default=0, help="images per split (0: all)")
    p.add_argument("--epochs", type=int, default=1, help="of the scaling and dropout runs")
    p.add_argument("--traffic-epochs", type=int, default=3, help="the most epochs of a traffic run")
    p.add_argument("--unit-seconds", type=float, default=None, help="a unit's target wall time (default: serve's)")
    p.add_argument("--eval-seconds", type=float, default=2.0)
    p.add_argument("--inner-steps", type=int, default=None,
                   help="DiLoCo's H, the most inner steps of a unit (default: serve's 50; traffic: 20)")  # fmt: skip
    p.add_argument("--overlap", default="",
                   help="diloco's overlapped rounds: on, off, or off,on (both; default: serve's)")  # fmt: skip
    p.add_argument("--shard-samples", type=int, default=None,
                   help="samples per data shard (default: serve's 10 000)")  # fmt: skip
    p.add_argument("--traffic-workers", type=int, default=4)
    p.add_argument("--target", type=float, default=0.95, help="test accuracy of the traffic section (0-1)")
    p.add_argument("--uplink-mbit", type=float, default=20.0)
    p.add_argument("--time-cap", type=float, default=300.0, help="seconds a single run may take")
    p.add_argument("--public", action="store_true",
                   help="keep the public coordinator's redundancy checks and rate limits (2+ workers)")  # fmt: skip
    p.add_argument("--data", default=None, help="dataset directory (else $VKBLAS_DATA)")
    p.add_argument("--json", default=None, metavar="PATH")
    preset = p.parse_known_args()[0].preset
    if preset:
        p.set_defaults(**PRESETS[preset][0])  # flags given on the command line still win
    args = p.parse_args()
    stages = PRESETS[preset][1] if preset else [(name, {}) for name in args.sections.split(",")]
    results: dict[str, Any] = {"args": vars(args), "tables": [], "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    sections = {"scaling": scaling, "dropout": dropout, "traffic": traffic}
    t0 = time.monotonic()
    for name, overrides in stages:
        stage = argparse.Namespace(**{**vars(args), **overrides})
        stage.workers = [int(x) for x in str(stage.workers).split(",")]
        stage.algorithms = stage.algorithms.split(",")
        stage.devices = stage.devices.split(",")
        stage.overlap = [v for v in stage.overlap.split(",") if v]
        if any(v not in ("on", "off") for v in stage.overlap):
            p.error(f"--overlap takes on, off or off,on, not {args.overlap!r}")
        stage.limit = stage.limit or None
        sections[name](stage, results)
    print(f"\n{len(stages)} stage(s) in {time.monotonic() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
