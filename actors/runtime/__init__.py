"""The run: the team's procedure, journals and lanes over the log, the supervisor and the Ray
services (Ray applied in remote.py alone), in-process execution, replay, resume, deployment and
batches. Knows roles, model and code; the cli knows it."""
