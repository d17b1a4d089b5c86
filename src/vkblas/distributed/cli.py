"""``vkblas distributed serve | join | status``: the commands of distributed training over the network.

``serve`` takes the options of ``vkblas train`` (the run is the same training, spread over volunteers) plus how the
work is spread; ``join`` donates a device; ``status`` shows a run. The server's packages (FastAPI, uvicorn,
SQLAlchemy, Alembic, psycopg) are imported only by ``serve``: ``join`` and ``status`` need httpx alone.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def add_commands(sub: Any, positive_int: Any, positive_float: Any, device: Any) -> None:
    """Add ``distributed`` and its sub-commands to the ``vkblas`` parser's sub-parsers ``sub``."""
    from ..training import DATASETS, MODELS
    from ..training.fit import OPTIMIZERS
    from .text import GPT_SIZES, VOCAB

    dist = sub.add_parser("distributed", help="train one model on many machines: serve, join, status")
    cmds = dist.add_subparsers(dest="distributed_command", metavar="COMMAND", required=True)

    serve = cmds.add_parser(
        "serve",
        help="run a coordinator: the run's state, work units, model versions (see docs/PROTOCOL.md)",
        description="Serve a training run to workers that 'vkblas distributed join' it. The run is defined by "
        "the options of 'vkblas train' plus the distributed ones; restarting with the same --db and --store "
        "resumes it.",
    )
    serve.add_argument("dataset", choices=[*sorted(DATASETS), *VOCAB])
    serve.add_argument(
        "--model", choices=[*MODELS, *GPT_SIZES], default=None, help="default: mlp; gpt-char for shakespeare-char"
    )
    serve.add_argument("--epochs", type=positive_int, default=1)
    serve.add_argument("--samples", type=positive_int, default=None, help="total training samples (default: epochs)")
    serve.add_argument("--batch-size", type=positive_int, default=128)
    serve.add_argument("--lr", type=positive_float, default=None, help="peak learning rate, cosine-decayed")
    serve.add_argument("--optimizer", choices=OPTIMIZERS, default="adam", help="sync/async: the run's optimizer")
    serve.add_argument("--seed", type=int, default=0)
    serve.add_argument("--limit", type=positive_int, default=None, help="use the first N images of each split")
    serve.add_argument(
        "--algorithm", choices=("diloco", "async", "sync"), default="diloco", help="how updates are combined"
    )
    serve.add_argument("--max-staleness", type=int, default=None, help="versions (async) or rounds (sync/diloco)")
    serve.add_argument("--inner-steps", type=positive_int, default=50, help="diloco: the most inner steps per unit")
    serve.add_argument("--outer-lr", type=positive_float, default=0.7, help="diloco: outer Nesterov SGD rate")
    serve.add_argument("--outer-momentum", type=float, default=0.9, help="diloco: outer momentum")
    serve.add_argument("--codec", choices=("fp32", "fp16", "int8"), default="fp32", help="how results travel")
    serve.add_argument("--block", type=positive_int, default=256, help="int8: values per scale")
    serve.add_argument("--unit-seconds", type=positive_float, default=3.0, help="target wall time of a unit")
    serve.add_argument("--quorum", type=float, default=None, help="sync/diloco: fraction of a round's samples")
    serve.add_argument("--round-seconds", type=positive_float, default=None, help="sync/diloco: round deadline")
    serve.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=None,
                       help="diloco: lease one unit ahead of the open round, not wait for it (default on)")  # fmt: skip
    serve.add_argument("--lease-seconds", type=positive_float, default=30.0, help="a lease without heartbeat expires")
    serve.add_argument("--eval-seconds", type=positive_float, default=10.0, help="evaluate at most this often")
    serve.add_argument("--shard-samples", type=positive_int, default=10_000, help="samples per data shard")
    serve.add_argument("--max-norm", type=positive_float, default=None, help="refuse updates of a larger L2 norm")
    trust = serve.add_argument_group("untrusted workers (docs/PROTOCOL.md, 'Validation')")
    trust.add_argument("--no-validation", action="store_true",
                       help="your own workers: nothing checked (--validate-fraction 0 --trust-after 0)")  # fmt: skip
    trust.add_argument("--validate-fraction", type=float, default=None, help="share of trusted units computed twice")
    trust.add_argument("--trust-after", type=int, default=None, help="agreeing results in a row before trust")
    trust.add_argument("--max-unchecked", type=positive_int, default=3, help="units out before a first check")
    trust.add_argument("--suspend-after", type=positive_int, default=3, help="invalid results that suspend")
    trust.add_argument("--tolerance", type=positive_float, default=None, help="override the measured tolerance")
    trust.add_argument("--norm-factor", type=positive_float, default=4.0, help="suspect norms this far from median")
    trust.add_argument("--aggregate", choices=("mean", "trimmed-mean"), default="trimmed-mean", help="round rule")
    trust.add_argument("--trim", type=float, default=0.1, help="trimmed-mean: share dropped at each end")
    trust.add_argument("--inner-state", choices=("fresh", "kept"), default=None,
                       help="diloco: a new AdamW per unit (default) or the worker's kept (no validation)")  # fmt: skip
    net = serve.add_argument_group("network and security")
    net.add_argument("--tls-cert", default=None, metavar="PEM", help="serve HTTPS with this certificate")
    net.add_argument("--tls-key", default=None, metavar="PEM", help="and this private key")
    net.add_argument("--trusted-proxy", action="append", default=[], metavar="ADDR",
                     help="believe X-Forwarded-For from this address or CIDR (repeatable)")  # fmt: skip
    net.add_argument("--rate-per-address", type=float, default=50.0, help="requests/s per client address (0: off)")
    net.add_argument("--burst-per-address", type=positive_int, default=200)
    net.add_argument("--rate-per-token", type=float, default=20.0, help="requests/s per token (0: off)")
    net.add_argument("--burst-per-token", type=positive_int, default=60)
    net.add_argument("--admin-token-file", default=None, help="the organiser's token (default: STORE/admin-token)")
    serve.add_argument("--db", default="coordinator.db", help="a SQLite file (default) or postgresql://...")
    serve.add_argument("--store", default="coordinator-store", help="directory of the content-addressed shards")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    serve.add_argument("--port", type=int, default=8470)
    serve.add_argument("--workers", type=positive_int, default=1, help="uvicorn worker processes (PostgreSQL)")
    serve.add_argument("--data", default=None, metavar="DIR", help="the dataset's directory (as for vkblas train)")
    serve.add_argument("--checkpoint-seconds", type=float, default=5.0,
                       help="async: optimizer state at most this often (a restart replays the rest)")  # fmt: skip
    serve.add_argument("--eval-threads", type=positive_int, default=2, help="threads of the test-set evaluation")
    serve.add_argument("--eval-share", type=positive_float, default=0.1,
                       help="the most of the wall time the evaluation may take (0-1)")  # fmt: skip
    serve.set_defaults(func=cmd_serve)

    join = cmds.add_parser("join", help="donate this machine's device to a run (outbound HTTP only)")
    join.add_argument("--server", required=True, help="the coordinator's URL, e.g. http://host:8470")
    join.add_argument("--device", type=device, default="cpu", help="cpu, vulkan or vulkan:N")
    join.add_argument("--name", default="", help="how status lists this worker (default: device + random)")
    join.add_argument("--data", default=None, metavar="DIR", help="a local copy of the dataset, used if it matches")
    join.add_argument("--cache", default=None, metavar="DIR", help="shard cache (default ~/.cache/vkblas/worker)")
    join.add_argument("--max-units", type=positive_int, default=None, help="stop after this many units")
    join.add_argument("--retry-for", type=positive_float, default=300.0, help="give up after this long unreachable")
    join.add_argument("--error-feedback", action="store_true", help="fp16/int8: carry what compression lost")
    join.add_argument("--uplink-mbit", type=positive_float, default=None, help="simulate an uplink of this speed")
    join.add_argument("--delay-per-sample", type=float, default=0.0, help="simulate a slower device (seconds)")
    join.add_argument("--quiet", action="store_true", help="no progress bar")
    join.add_argument("--user-token", default=None, help="credit the work to this user ('distributed user' makes one)")
    join.add_argument("--ca-cert", default=None, metavar="PEM", help="trust this certificate for an https:// server")
    join.set_defaults(func=cmd_join)

    user = cmds.add_parser("user", help="make a user account on a run: its workers' credit adds up under its name")
    user.add_argument("--server", required=True)
    user.add_argument("name")
    user.add_argument("--ca-cert", default=None, metavar="PEM")
    user.set_defaults(func=cmd_user)

    admin = cmds.add_parser("admin", help="the organiser's run control: pause, resume, stop, ban, workers")
    admin.add_argument("--server", required=True)
    admin.add_argument("--token-file", required=True, help="the admin token's file (serve wrote it)")
    admin.add_argument("--ca-cert", default=None, metavar="PEM")
    admin.add_argument("action", choices=("pause", "resume", "stop", "ban", "unban", "workers"))
    admin.add_argument("worker", nargs="?", type=int, default=None, help="ban/unban: the worker id")
    admin.add_argument("--reason", default="", help="shown to the workers (pause, stop, ban)")
    admin.set_defaults(func=cmd_admin)

    status = cmds.add_parser("status", help="a run's progress, accuracy and workers")
    status.add_argument("--server", required=True)
    status.add_argument("--json", action="store_true", help="print the whole status as JSON")
    status.set_defaults(func=cmd_status)


def cmd_serve(args: argparse.Namespace) -> int:
    from .coordinator.config import RunSpec, ServeSettings
    from .coordinator.serve import serve
    from .text import VOCAB

    names = (
        "model epochs samples batch_size lr optimizer seed limit algorithm max_staleness inner_steps outer_lr "
        "outer_momentum codec block unit_seconds quorum round_seconds overlap lease_seconds eval_seconds max_norm "
        "shard_samples validate_fraction trust_after max_unchecked suspend_after tolerance norm_factor aggregate trim "
        "inner_state"
    ).split()
    from pydantic import ValidationError

    net = (
        "tls_cert tls_key rate_per_address burst_per_address rate_per_token burst_per_token admin_token_file "
        "checkpoint_seconds eval_threads eval_share"
    ).split()
    try:
        if args.model is None:
            args.model = "gpt-char" if args.dataset in VOCAB else "mlp"
        if args.no_validation:
            given = [f"--{k.replace('_', '-')} {getattr(args, k)}" for k in ("validate_fraction", "trust_after")
                     if getattr(args, k) not in (None, 0)]  # fmt: skip
            if given:
                raise ValueError(f"--no-validation turns checks off; it contradicts {' and '.join(given)}")
            args.validate_fraction, args.trust_after = 0.0, 0
        # an option left out takes RunSpec's default (some resolve from others: overlap, staleness, inner state)
        spec = RunSpec(dataset=args.dataset, **{k: v for k in names if (v := getattr(args, k)) is not None})
        settings = ServeSettings(
            db=args.db,
            store=args.store,
            host=args.host,
            port=args.port,
            workers=args.workers,
            data=args.data,
            trusted_proxies=args.trusted_proxy,
            **{k: getattr(args, k) for k in net},
        )
    except ValidationError as e:  # one line naming the option, as argparse's own errors do
        bad = "; ".join(
            f"--{'-'.join(str(p) for p in err['loc']).replace('_', '-')}: {err['msg']}" for err in e.errors()
        )
        raise ValueError(bad) from None
    return serve(settings, spec)


def cmd_join(args: argparse.Namespace) -> int:
    from .worker.join import JoinOptions, join

    s = join(
        JoinOptions(
            server=args.server,
            device=args.device,
            name=args.name,
            cache=args.cache,
            data=args.data,
            max_units=args.max_units,
            retry_for=args.retry_for,
            uplink_mbit=args.uplink_mbit,
            error_feedback=args.error_feedback,
            delay_per_sample=args.delay_per_sample,
            progress=not args.quiet,
            user_token=args.user_token,
            ca_cert=args.ca_cert,
        )
    )
    print(
        f"vkblas join: {s.units} units, {s.samples:,} samples, credit {s.credit:,}, {s.lost} lost; "
        f"sent {s.bytes_sent / 1e6:.1f} MB, received {s.bytes_received / 1e6:.1f} MB; "
        f"idle {100 * s.idle_s / max(s.wall_s, 1e-9):.0f}% of {s.wall_s:.0f} s ({s.stopped_by})"
    )
    return 130 if s.stopped_by.startswith("ctrl-c") else 0


def cmd_user(args: argparse.Namespace) -> int:
    from .worker.client import Client

    client = Client(args.server, retry_for=10.0, ca_cert=args.ca_cert)
    try:
        reply = client.create_user(args.name)
    finally:
        client.close()
    print(f"user {args.name} (id {reply.user_id}); its token, shown once (join --user-token ...):\n{reply.token}")
    return 0


def cmd_admin(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .worker.client import Client

    client = Client(args.server, retry_for=10.0, ca_cert=args.ca_cert)
    client.token = Path(args.token_file).read_text().strip()
    try:
        if args.action == "workers":
            print(json.dumps(client.request("GET", "/v1/admin/workers").json(), indent=2))
        elif args.action in ("ban", "unban"):
            if args.worker is None:
                raise ValueError(f"admin {args.action} needs a worker id")
            body = {"json": {"reason": args.reason or "banned by the organiser"}} if args.action == "ban" else {}
            print(json.dumps(client.request("POST", f"/v1/admin/workers/{args.worker}/{args.action}", **body).json()))
        else:
            st = client.request("POST", "/v1/admin/run", json={"action": args.action, "reason": args.reason}).json()
            print(f"run {st['run_id']}: {st['state']}")
    finally:
        client.close()
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from .worker.client import Client

    client = Client(args.server, retry_for=10.0)
    try:
        st = client.status()
    finally:
        client.close()
    if args.json:
        print(json.dumps(st.model_dump(), indent=2))
        return 0
    print(format_status(st))
    return 0


def format_status(st: Any) -> str:
    acc = f"{100 * st.test.accuracy:.2f}% (version {st.test.version})" if st.test else "not evaluated yet"
    lines = [
        f"run {st.run_id}: {st.state}, {st.algorithm} {st.model} on {st.dataset}",
        f"progress {100 * st.progress:.1f}% ({st.samples_leased:,} of {st.samples_total:,} samples handed out, "
        f"{st.samples_applied:,} applied); model version {st.version}; test accuracy {acc}",
        f"updates: {st.accepted} accepted, {st.stale} stale, {st.rejected} rejected, {st.pending} pending; "
        f"wire: {st.bytes_in / 1e6:.1f} MB in, {st.bytes_out / 1e6:.1f} MB out",
    ]
    header = ("worker", "device", "samples/s", "idle %", "units", "credit", "online")
    rows = [
        (
            w.name,
            w.device,
            f"{w.samples_per_s:,.0f}",
            f"{100 * w.idle_fraction:.0f}",
            str(w.units_done),
            f"{w.credit:,}",
            "yes" if w.online else "no",
        )
        for w in st.workers
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    lines.append(time.strftime("as of %H:%M:%S"))
    return "\n".join(lines)
