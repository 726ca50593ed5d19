"""Sharing what was built: a folder built once per node and once per cluster (builds.py), the
cluster's artifact store of built environments and testbeds (artifacts.py) and its archives
(archives.py), a node's cache kept within its bound (cache_bound.py), and a built folder moved to
another path (relocation.py). It knows nothing of how an environment or a testbed is built."""
