"""Every HTML page of magis-ray, from one Jinja2 template set (templates/) and its assets (static/):
the inspector's pages (`magis-ray serve`, cli/inspector/), the audit page (`magis-ray audit RUN
--format html`, and the audit.html `submit` writes), which is the inspector's run page in a
standalone mode: its style inline, no script, no link out of the page, and the charts of
`magis-ray eval --plots` (templates/chart.svg), escaped the same way. A run's sections are rendered
from its audit JSON (events/projections/audit.py) by templates/run_sections.html, for both. The
renderer sits beside the commands and the web app that use it, so that neither reaches into the
other.

Autoescaping is on, and every plain string printed first loses its control characters, shown as
\\xNN (a NUL truncates or breaks a page in browsers and tools). Nothing here needs Starlette."""
from __future__ import annotations

import re
import time
from functools import lru_cache
from importlib.resources import files

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from magis_ray.events.projections.audit import TEST_PURPOSES, describe
from magis_ray.events.projections.inspection import diff_lines

from ..wording import count, money

HERE = files(__package__)
STATIC = HERE / "static"  # the pages' style and the inspector's script, served by the inspector at /static
# Control characters (tabs and line ends aside), as model text may hold them.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
ROLES = ("supervisor", "custodian", "manager", "developer", "qa")


def visible(text: str) -> str:
    """`text` with its control characters written as \\xNN."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def shown(value: object) -> object:
    """Jinja2's finalize: every plain string printed loses its control characters (then autoescape)."""
    return visible(value) if type(value) is str else value


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(HERE / "templates")), autoescape=True, finalize=shown, undefined=StrictUndefined,
        trim_blocks=True, lstrip_blocks=True,
    )
    env.globals.update(describe=describe, TEST_PURPOSES=TEST_PURPOSES, ago=ago, money=money, num=num, clock=clock,
                       seconds=seconds, short=short, type_name=lambda e: type(e).__name__, marked=marked,
                       diff_lines=diff_lines, offset=offset, swimlanes=swimlanes,
                       models_of=models_of, role_model_rows=role_model_rows, count=count,
                       now=time.time)
    return env


def num(value: int | float) -> str:
    return f"{value:,}"


def seconds(value: float) -> str:
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(value), 60)
    return f"{minutes}:{secs:02d} min" if minutes < 60 else f"{minutes // 60}:{minutes % 60:02d} h"


def offset(value: float) -> str:
    """Time since the run's first event: +1.25 s, +2:05.50."""
    if value < 60:
        return f"+{value:.2f} s"
    minutes, secs = divmod(value, 60)
    return f"+{int(minutes)}:{secs:05.2f}"


def clock(value: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value)) if value else "-"


def ago(value: float) -> str:
    return seconds(max(0.0, time.time() - value)) + " ago" if value else "-"


def short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def marked(text: str, words: list[str], width: int = 220) -> Markup:
    """A snippet of `text` around the first query word, each query word wrapped in <mark>; every
    piece of the text is escaped."""
    flat = visible(" ".join(text.split()))
    pattern = re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)), re.IGNORECASE) if words else None
    hit = pattern.search(flat) if pattern else None
    start = max(0, hit.start() - width // 3) if hit else 0
    piece = flat[start : start + width]
    out, at = [], 0
    for m in pattern.finditer(piece) if pattern else ():
        out += [escape(piece[at : m.start()]), Markup("<mark>"), escape(m.group()), Markup("</mark>")]
        at = m.end()
    out.append(escape(piece[at:]))
    return Markup(("…" if start else "") + "".join(out) + ("…" if start + width < len(flat) else ""))


def models_of(doc: dict) -> list[str]:
    """The models that answered the run's requests."""
    return sorted({model for models in doc["metrics"]["by_role_model"].values() for model in models})


def role_model_rows(doc: dict) -> list[tuple[str, dict]]:
    """Tokens, cost and time per role and the model that answered it."""
    return [(f"{role} · {model}", b) for role, models in doc["metrics"]["by_role_model"].items() for model, b in models.items()]


def swimlanes(doc: dict, left: int = 100, width: int = 1000, row: int = 26) -> dict | None:
    """Where the timeline's picture draws each event: a row per role, a tick per event, a bar per
    model call's latency (ending when it was recorded)."""
    timeline = [{**t, "role": t["actor"].split(":", 1)[0]} for t in doc["timeline"]]
    if not timeline:
        return None
    present = {t["role"] for t in timeline}
    roles = [r for r in ROLES if r in present] + sorted(present - set(ROLES))
    start = timeline[0]["time"]
    span = max(t["time"] for t in timeline) - start
    scale = width / (span or 1.0)
    exchanges = {x["version"]: x for x in doc["exchanges"]}
    failed = {f["version"] for f in doc["failures"]}
    old = set(doc["superseded"])
    lanes = []
    for i, role in enumerate(roles):
        marks = []
        for t in (t for t in timeline if t["role"] == role):
            x = left + (t["time"] - start) * scale
            call = exchanges.get(t["version"])
            bar = None
            if call and call["latency_s"] > 0:
                x0 = max(x - call["latency_s"] * scale, left)  # a call began at most at the run's start
                bar = (round(x0, 1), round(max(x - x0, 2.0), 1))
            marks.append({"x": round(x - 1, 1), "bar": bar, "failed": t["version"] in failed, "old": t["version"] in old,
                          "title": f"{t['actor']}: {t['what']}"})
        lanes.append({"role": role, "y": i * row, "marks": marks})
    ticks = [{"x": round(left + width * k / 5, 1), "anchor": "start" if k == 0 else "end" if k == 5 else "middle",
              "label": offset(span * k / 5)} for k in range(6)]
    return {"left": left, "width": width, "row": row, "height": row * len(roles) + 24, "lanes": lanes, "ticks": ticks,
            "axis_y": row * len(roles) + 16}


def render(name: str, **context) -> str:
    return environment().get_template(name).render(**context)


def audit_page(doc: dict) -> str:
    """The audit page of one run (its audit JSON): one self-contained HTML file."""
    style = (STATIC / "inspector.css").read_text(encoding="utf-8")
    title = doc["instance"]["instance_id"] if doc["instance"] else (doc["run_id"] or "empty run")
    return render("audit.html", title=f"MAGIS audit: {title}", doc=doc, style=Markup(style), standalone=True, live="",
                  role="", stalled=False, store="")
