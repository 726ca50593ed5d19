"""Pure folds over a run's events: its state, final diff, metrics, audit trail and prediction."""
from .audit import audit_json, audit_markdown
from .diff import final_diff
from .usage import metrics
from .prediction import prediction
from .pull_request import commit_message, pr_description
from .state import RunView, fold

__all__ = [
    "RunView", "audit_json", "audit_markdown", "commit_message", "final_diff", "fold", "metrics", "pr_description",
    "prediction",
]
