"""`magis-ray serve`: the inspector as a Starlette app over one store. Read-only: every route is a
GET (anything else is 405), pages are rendered on the server by Jinja2 with autoescaping on, and a
little JavaScript (cli/pages/static/inspector.js) swaps in the parts of a page that changed when the store's
event stream (server-sent events from /live) says so."""
from __future__ import annotations

import asyncio
import contextlib
import json
from typing import AsyncIterator
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from magis_ray.events import schema as ev
from magis_ray.events.projections import audit_json
from magis_ray.store import UnknownRun

from ..pages import STATIC, environment
from . import listing
from .compare import compare
from .live import Hub
from .state import Inspector

# Headers on every answer: no script but our own file, no frame, no referrer, no sniffing.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}
SEARCH_PAGE = 50  # results on one page of search


class Pages:
    def __init__(self, inspector: Inspector, hub: Hub, store_label: str) -> None:
        self.inspector, self.hub, self.store_label = inspector, hub, store_label
        self.env = environment()

    def render(self, name: str, status: int = 200, **context) -> HTMLResponse:
        body = self.env.get_template(name).render(store=self.store_label, **context)
        return HTMLResponse(body, status_code=status)

    def not_found(self, what: str) -> HTMLResponse:
        return self.render("missing.html", status=404, title="Not found", what=what, live="")

    # --- pages ------------------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        return await run_in_threadpool(self._runs, dict(request.query_params))

    def _runs(self, params: dict[str, str]) -> Response:
        catalog = self.inspector.catalog
        query = listing.RunQuery.parse(params)
        stalled = self.inspector.stalled()
        runs = query.apply(list(catalog.runs.values()), stalled)
        return self.render(
            "runs.html", title="Runs", live="/live", query=query, stalled=stalled, runs=runs[: query.limit], total=len(catalog.runs),
            matching=len(runs), batches=catalog.batches(), gradings=sorted(catalog.gradings.values(), key=lambda g: -g.last_time),
            choices=listing.choices(catalog), sort_link=lambda key: "?" + urlencode(query.sorted_by(key)),
            more_link="?" + urlencode({**query.params(), "limit": str(query.limit * 4)}),
        )

    async def run(self, request: Request) -> Response:
        return await run_in_threadpool(self._run, request.path_params["run_id"], request.query_params.get("role", ""))

    def _run(self, run: str, role: str) -> Response:
        try:
            run_id = self.inspector.resolve(run)
            view = self.inspector.view(run_id)
        except UnknownRun as exc:
            return self.not_found(str(exc))
        title = view.started.instance_id if view.started else run_id
        return self.render(
            "run.html", title=title, live=f"/live?run={run_id}", doc=audit_json(view), s=self.inspector.summary(run_id),
            role=role, stalled=run_id in self.inspector.stalled(), standalone=False,
        )

    async def exchange(self, request: Request) -> Response:
        return await run_in_threadpool(self._exchange, request.path_params["run_id"], request.path_params["version"])

    def _exchange(self, run: str, version: int) -> Response:
        try:
            run_id = self.inspector.resolve(run)
            events = self.inspector.store.read(run_id)
        except UnknownRun as exc:
            return self.not_found(str(exc))
        exchanges = [r for r in events if isinstance(r.event, ev.LLMExchanged)]
        at = next((i for i, r in enumerate(exchanges) if r.version == version), None)
        if at is None:
            return self.not_found(f"run {run_id} has no model exchange at event {version}")
        rec = exchanges[at]
        decision = next((r for r in events[rec.version:] if r.actor == rec.actor and not isinstance(r.event, ev.LLMExchanged)), None)
        return self.render(
            "exchange.html", title=f"{rec.event.purpose} · {run_id}", live="", run_id=run_id, rec=rec, x=rec.event,
            decision=decision, previous=exchanges[at - 1] if at else None, following=exchanges[at + 1] if at + 1 < len(exchanges) else None,
            summary=self.inspector.summary(run_id),
        )

    async def compare(self, request: Request) -> Response:
        return await run_in_threadpool(self._compare, request.query_params.get("a", ""), request.query_params.get("b", ""))

    def _compare(self, a: str, b: str) -> Response:
        runs = sorted(self.inspector.catalog.runs.values(), key=lambda r: -r.first_time)
        if not (a and b):
            return self.render("compare.html", title="Compare", live="", runs=runs, a=a, b=b, result=None)
        try:
            left_id, right_id = self.inspector.resolve(a), self.inspector.resolve(b)
            left, right = self.inspector.store.read(left_id), self.inspector.store.read(right_id)
        except UnknownRun as exc:
            return self.not_found(str(exc))
        result = compare(left, right)
        return self.render(
            "compare.html", title=f"Compare {left_id} and {right_id}", live=f"/live?run={left_id}&run={right_id}",
            runs=runs, a=left_id, b=right_id, result=result, left=self.inspector.summary(left_id),
            right=self.inspector.summary(right_id),
        )

    async def search(self, request: Request) -> Response:
        params = request.query_params
        types = [t for t in params.getlist("type") if t]
        shown = params.get("shown", "")
        return await run_in_threadpool(self._search, params.get("q", ""), types, params.get("before", ""),
                                       int(shown) if shown.isdigit() else 0)

    def _search(self, q: str, types: list[str], before: str, shown: int) -> Response:
        """One page of results, newest first; the next page starts below this page's last event
        (`before`), and `shown` counts the results of the pages before it, for numbering."""
        from magis_ray.events.text import searchable_text
        from magis_ray.store.fulltext import parse_query

        before_position = int(before) if before.isdigit() else None
        found = (self.inspector.store.search(q, types=types, limit=SEARCH_PAGE + 1, before_position=before_position)
                 if q.strip() else [])
        hits = found[:SEARCH_PAGE]
        words = [w for term in parse_query(q) for w in term.words]
        results = [(rec, self.inspector.catalog.runs.get(rec.run_id), searchable_text(rec)) for rec in hits]
        query = [("q", q), *[("type", t) for t in types]]
        next_link = ("?" + urlencode([*query, ("before", str(hits[-1].position)), ("shown", str(shown + len(hits)))])
                     if len(found) > SEARCH_PAGE else "")
        first_link = "?" + urlencode(query) if before_position is not None else ""
        return self.render(
            "search.html", title=f"Search: {q}" if q else "Search", live="", q=q, types=types, results=results, words=words,
            event_types=sorted(cls.__struct_config__.tag for cls in ev.AnyEvent.__args__), next_link=next_link,
            first_link=first_link, shown=shown,
        )

    async def live(self, request: Request) -> Response:
        """Server-sent events: "change" with the ids of the streams that changed (only the runs
        asked for, when some are)."""
        wanted = set(request.query_params.getlist("run"))
        return StreamingResponse(self._stream(wanted), media_type="text/event-stream",
                                 headers={"cache-control": "no-store", "x-accel-buffering": "no"})

    async def _stream(self, wanted: set[str]) -> AsyncIterator[str]:
        with self.hub.subscription() as queue:
            yield "retry: 2000\n\n"
            while True:
                try:
                    changed = await asyncio.wait_for(queue.get(), timeout=15)
                except asyncio.TimeoutError:
                    yield ": ping\n\n"  # keeps proxies open, and finds a client that left
                    continue
                if changed is None:  # the server stops
                    return
                hit = sorted(changed & wanted if wanted else changed)
                if hit:
                    yield f"event: change\ndata: {json.dumps(hit[:200])}\n\n"


def make_app(inspector: Inspector, store_label: str, hosts: list[str], poll_s: float = 0.5) -> Starlette:
    hub = Hub(inspector, poll_s)
    pages = Pages(inspector, hub, store_label)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await run_in_threadpool(inspector.refresh)
        task = asyncio.create_task(hub.run())
        try:
            yield
        finally:
            hub.close()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    get = ["GET"]
    routes = [
        Route("/", pages.runs, methods=get),
        Route("/runs/{run_id}", pages.run, methods=get),
        Route("/runs/{run_id}/exchanges/{version:int}", pages.exchange, methods=get),
        Route("/compare", pages.compare, methods=get),
        Route("/search", pages.search, methods=get),
        Route("/live", pages.live, methods=get),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=hosts), Middleware(SecurityHeaders)]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every answer (a plain ASGI middleware: streams pass through as they are)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items() if k.encode() not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)
