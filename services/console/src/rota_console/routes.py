"""The pages, their JSON twins (same URL, `Accept: application/json` or `?format=json`),
login, the live feed and the one write: cancelling a job of one's own team."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError
from rota import waits
from rota.contracts.envelope import first_error
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from rota_console import joblist, views
from rota_console.access import (
    LoginRefused,
    check_form_token,
    csrf_token,
    log_in,
    log_out,
    verify,
    viewer_of,
)
from rota_console.console import Console
from rota_console.fairshare import fairshare_page, polyline
from rota_console.pages import Page, PreemptionsPage
from rota_console.reader import PLATFORM, ApiFailure, Viewer
from rota_console.times import prose, time_html

templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
templates.env.globals["polyline"] = polyline
templates.env.globals["plan_reason"] = waits.plan_reason
templates.env.globals["prose"] = prose
templates.env.globals["time_html"] = time_html
templates.env.globals["page_url"] = joblist.page_url

STATUS = {"NOT_FOUND": 404, "JOB_NOT_FOUND": 404, "AMBIGUOUS_ID": 400, "UNAUTHORISED": 403,
          "UNTRUSTED_PEER": 403, "UNAVAILABLE": 503, "INTERNAL": 502}
"""HTTP status per API error code; any other code is the request's fault (400)."""


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def wants_json(request: Request) -> bool:
    if request.query_params.get("format") == "json":
        return True
    accept = request.headers.get("accept", "")
    first = accept.split(",")[0].split(";")[0].strip()
    return first == "application/json"


class NotLoggedIn(Exception):
    pass


def _viewer(request: Request) -> Viewer:
    console = _console(request)
    viewer = viewer_of(request, console.settings, console.sessions)
    if viewer is None:
        raise NotLoggedIn()
    if not viewer.is_platform and viewer.team not in console.config.teams:
        raise ApiFailure("UNAUTHORISED", f"unknown team {viewer.team!r}", "team")
    return viewer


def _now() -> datetime:
    return datetime.now(UTC)


def render(request: Request, template: str, page: Page, status: int = 200) -> Response:
    if wants_json(request):
        return JSONResponse(page.model_dump(mode="json"), status_code=status)
    console = _console(request)
    context: dict[str, Any] = {
        "page": page, "colours": views.team_colours(console.config),
        "csrf": csrf_token(request), "trusted": bool(console.settings.trusted_header),
    }
    return templates.TemplateResponse(request, template, context, status_code=status)


def failure(request: Request, exc: ApiFailure) -> Response:
    status = STATUS.get(exc.code, 400)
    body = {"error": {"code": exc.code, "field": exc.field, "message": exc.message}}
    if wants_json(request):
        return JSONResponse(body, status_code=status)
    return templates.TemplateResponse(request, "error.html", body, status_code=status)


def guarded(handler: Any) -> Any:
    """Login first, then the API's refusals as pages (or JSON) that say why."""
    async def endpoint(request: Request) -> Response:
        try:
            response: Response = await handler(request, _viewer(request))
            return response
        except NotLoggedIn:
            if wants_json(request):
                return JSONResponse({"error": {"code": "UNAUTHENTICATED", "field": None,
                                               "message": "log in with your team's credentials"}},
                                    status_code=401)
            return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
        except ApiFailure as exc:
            return failure(request, exc)
        except ValidationError as exc:  # a malformed id in the URL: the request's fault
            err = first_error(exc)
            return failure(request, ApiFailure(err.code, err.message, err.field))
    return endpoint


async def queues(request: Request, viewer: Viewer) -> Response:
    api = _console(request).api()
    summary, jobs = await asyncio.gather(api.queues(viewer), api.jobs(viewer))
    page = views.queues_page(viewer, summary, jobs, _console(request).config, _now())
    return render(request, "queues.html", page)


async def job(request: Request, viewer: Viewer) -> Response:
    console = _console(request)
    api = console.api()
    job_id = request.path_params["job_id"]
    why, trace = await asyncio.gather(api.why(viewer, job_id), api.trace(viewer, job_id))
    notifications: list[dict[str, Any]] = []
    plans: list[dict[str, Any]] = []
    error = None
    try:
        notifications = await api.notifications(viewer, trace["job"])
    except ApiFailure as exc:  # the notifier down costs the list, not the page
        error = exc.message
    if trace.get("preemptions"):
        # The victims' notices and acknowledgements are the coordinator's; without it the
        # caused card shows what the trace has.
        with contextlib.suppress(ApiFailure):
            plans = await api.plans(viewer, job_id=trace["job"]["job_id"])
    page = views.job_page(viewer, why, trace, notifications, jaeger_url=console.settings.jaeger_url,
                          notifications_error=error, now=_now(), plans=plans)
    return render(request, "job.html", page)


async def jobs(request: Request, viewer: Viewer) -> Response:
    console = _console(request)
    page = await joblist.jobs_page(console.api(), viewer, console.config,
                                   dict(request.query_params), _now())
    return render(request, "jobs.html", page)


async def cluster(request: Request, viewer: Viewer) -> Response:
    console = _console(request)
    api = console.api()
    allocations, plans, jobs = await asyncio.gather(
        api.allocations(), api.plans(viewer, open_only=True), api.jobs(viewer, limit=1000))
    names = {j["job_id"]: j["name"] for j in jobs}
    for alloc in allocations:
        alloc.setdefault("job_name", names.get(alloc.get("job_id", "")))
    page = views.cluster_page(viewer, console.config, allocations, plans, _now())
    return render(request, "cluster.html", page)


async def fairshare(request: Request, viewer: Viewer) -> Response:
    console = _console(request)
    if not console.history.samples:
        await console.sample_once()
    page = fairshare_page(viewer, console.config, console.history,
                          console.settings.sample_interval_s, _now())
    return render(request, "fairshare.html", page)


async def preemptions(request: Request, viewer: Viewer) -> Response:
    plans = await _console(request).api().plans(viewer)
    page = PreemptionsPage(viewer=viewer.team, generated_at=_now(), plans=plans)
    return render(request, "preemptions.html", page)


async def cancel(request: Request, viewer: Viewer) -> Response:
    form = await request.form()
    check_form_token(request, form)
    if form.get("confirm") != "yes":
        raise ApiFailure("CONFIRMATION_REQUIRED", "confirm the cancellation", "confirm")
    api = _console(request).api()
    job_id = request.path_params["job_id"]
    row = (await api.trace(viewer, job_id))["job"]
    result = await api.cancel(viewer, row, "cancelled from the console")
    if wants_json(request):
        return JSONResponse({"ok": True, "result": result})
    return RedirectResponse(f"/jobs/{row['job_id']}", status_code=303)


async def events(request: Request, viewer: Viewer) -> Response:
    return StreamingResponse(_console(request).relay.stream(viewer),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def login_form(request: Request) -> Response:
    console = _console(request)
    if console.settings.trusted_header:
        return RedirectResponse("/queues", status_code=303)
    return templates.TemplateResponse(request, "login.html", {
        "error": None, "next": _safe_next(request.query_params.get("next"))})


async def login(request: Request) -> Response:
    console = _console(request)
    if console.settings.trusted_header:
        return RedirectResponse("/queues", status_code=303)
    address = request.client.host if request.client else "unknown"
    if (wait_s := console.logins.retry_after_s(address)) is not None:
        return JSONResponse({"error": {"code": "RATE_LIMITED", "field": None, "message":
                                       f"too many logins from {address}; try again in "
                                       f"{wait_s:.0f} s"}},
                            status_code=429, headers={"Retry-After": str(int(wait_s))})
    form = await request.form()
    creds = form.get("creds")
    text = creds if isinstance(creds, str) else ""
    upload = form.get("creds_file")
    if not text.strip() and upload is not None and not isinstance(upload, str):
        text = (await upload.read(64 * 1024)).decode(errors="replace")
    next_url = _safe_next(str(form.get("next") or ""))
    try:
        if not text.strip():
            raise LoginRefused("creds: paste your team's .creds file, or choose it")
        signed_in = await verify(text, console.nats_url, console.trust)
    except LoginRefused as exc:
        if wants_json(request):
            return JSONResponse({"error": {"code": "LOGIN_REFUSED", "field": "creds",
                                           "message": str(exc)}}, status_code=401)
        return templates.TemplateResponse(request, "login.html",
                                          {"error": str(exc), "next": next_url}, status_code=401)
    log_in(request, signed_in, console.sessions, console.clock.now(),
           console.settings.session_max_age_s)
    if wants_json(request):
        return JSONResponse({"ok": True, "viewer": signed_in.viewer.team})
    return RedirectResponse(next_url, status_code=303)


async def logout(request: Request) -> Response:
    log_out(request, _console(request).sessions)
    return RedirectResponse("/login", status_code=303)


def _safe_next(value: str | None) -> str:
    """Only a path of this site: never an open redirect."""
    if value and value.startswith("/") and not value.startswith("//"):
        return value
    return "/queues"


async def healthz(request: Request) -> Response:
    console = _console(request)
    ok = console.nc is not None and console.nc.is_connected
    return JSONResponse({"ok": ok}, status_code=200 if ok else 503)


async def home(request: Request) -> Response:
    return RedirectResponse("/queues", status_code=303)


ROUTES = [
    Route("/", home),
    Route("/healthz", healthz),
    Route("/login", login_form, methods=["GET"]),
    Route("/login", login, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
    Route("/queues", guarded(queues)),
    Route("/jobs", guarded(jobs)),
    Route("/jobs/{job_id}", guarded(job)),
    Route("/jobs/{job_id}/cancel", guarded(cancel), methods=["POST"]),
    Route("/cluster", guarded(cluster)),
    Route("/fairshare", guarded(fairshare)),
    Route("/preemptions", guarded(preemptions)),
    Route("/events", guarded(events)),
]

__all__ = ["PLATFORM", "ROUTES"]
