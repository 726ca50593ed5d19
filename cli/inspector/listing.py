"""The runs list's filters and sorts, from the page's query string."""
from __future__ import annotations

from dataclasses import dataclass

from magis_ray.events.projections.catalog import Catalog, RunSummary

SORTS = {
    "time": lambda r: r.first_time,
    "cost": lambda r: r.cost_usd,
    "tokens": lambda r: r.tokens,
    "duration": lambda r: r.seconds,
    "events": lambda r: r.events,
}
STATUSES = ("running", "stalled", "finished", "failed")
OUTCOMES = ("patched", "no_patch", "failed")


@dataclass(frozen=True)
class RunQuery:
    status: str = ""
    outcome: str = ""
    batch: str = ""
    instance: str = ""
    model: str = ""
    sort: str = "time"
    order: str = "desc"
    limit: int = 1000

    @classmethod
    def parse(cls, params: dict[str, str]) -> RunQuery:
        sort = params.get("sort", "time")
        limit = params.get("limit", "")
        return cls(
            status=params.get("status", "") if params.get("status", "") in STATUSES else "",
            outcome=params.get("outcome", "") if params.get("outcome", "") in OUTCOMES else "",
            batch=params.get("batch", ""), instance=params.get("instance", "").strip(), model=params.get("model", ""),
            sort=sort if sort in SORTS else "time", order="asc" if params.get("order") == "asc" else "desc",
            limit=max(1, min(int(limit), 100_000)) if limit.isdigit() else 1000,
        )

    def params(self) -> dict[str, str]:
        """The query string that gives this query back (defaults left out)."""
        defaults = RunQuery()
        return {k: str(v) for k, v in vars(self).items() if v != getattr(defaults, k)}

    def sorted_by(self, key: str) -> dict[str, str]:
        order = "asc" if self.sort == key and self.order == "desc" else "desc"
        return {**self.params(), "sort": key, "order": order}

    def keeps(self, run: RunSummary, stalled: set[str]) -> bool:
        status = "stalled" if run.run_id in stalled else run.status
        outcome = "failed" if run.status == "failed" else run.outcome
        return (
            (not self.status or status == self.status)
            and (not self.outcome or outcome == self.outcome)
            and (not self.batch or run.batch == self.batch)
            and (not self.instance or self.instance.lower() in run.instance_id.lower() or run.run_id.startswith(self.instance))
            and (not self.model or run.model == self.model or self.model in run.models)
        )

    def apply(self, runs: list[RunSummary], stalled: set[str]) -> list[RunSummary]:
        kept = [r for r in runs if self.keeps(r, stalled)]
        return sorted(kept, key=SORTS[self.sort], reverse=self.order == "desc")


def choices(catalog: Catalog) -> dict[str, list[str]]:
    runs = catalog.runs.values()
    return {
        "status": list(STATUSES),
        "outcome": list(OUTCOMES),
        "batch": sorted({r.batch for r in runs if r.batch}),
        "model": sorted({r.model for r in runs if r.model} | {m for r in runs for m in r.models}),
    }
