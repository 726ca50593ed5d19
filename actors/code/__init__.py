"""The repository side: a commit read through pygit2, BM25 file ranking, line edits and diffs.
Knows events; nothing of the model, the runtime or Ray."""
