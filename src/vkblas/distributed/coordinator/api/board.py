"""The public face of the run: the leaderboard and dashboard as JSON, and the web page that shows them (plain HTML,
CSS and JavaScript from the package, inline SVG charts: nothing from another host)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse

from ...protocol import API, Dashboard, LeaderboardRow
from ..errors import ApiError
from ..report import dashboard, leaderboard, run_status
from .deps import Context

router = APIRouter(tags=["dashboard"])
WEB = Path(__file__).resolve().parent.parent / "web"
#: the only files served from it, by name: no path from the URL reaches the file system
FILES = {"style.css": "text/css", "dashboard.js": "text/javascript"}


@router.get(f"{API}/leaderboard", response_model=list[LeaderboardRow], summary="Validated credit per user (public)")
def leaderboard_json(request: Request) -> list[LeaderboardRow]:
    ctx = Context.of(request)
    with ctx.db.read_session() as s:
        return leaderboard(run_status(s, spec=ctx.spec))


@router.get(f"{API}/dashboard", response_model=Dashboard, summary="What the web page shows (public)")
def dashboard_json(request: Request) -> Dashboard:
    ctx = Context.of(request)
    with ctx.db.read_session() as s:
        return dashboard(s, spec=ctx.spec)


@router.get("/", include_in_schema=False)
def page() -> FileResponse:
    return FileResponse(WEB / "index.html", media_type="text/html", headers={"cache-control": "no-cache"})


@router.get("/web/{name}", include_in_schema=False)
def asset(name: str) -> FileResponse:
    if name not in FILES:
        raise ApiError("not-found", f"no file {name[:60]!r} (the page's files: {', '.join(FILES)})")
    return FileResponse(WEB / name, media_type=FILES[name], headers={"cache-control": "no-cache"})
