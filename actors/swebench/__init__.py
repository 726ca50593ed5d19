"""SWE-bench: instances and their gold patches, the paper's evaluation metrics, and the oracle
answer source. Stands on the runtime; only the cli and benchmarks import it."""
