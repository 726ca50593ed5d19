"""The inspector: `magis-ray serve`, a local read-only web app over the store (runs, batches,
gradings, a run's decisions, compare, search, all live), and `magis-ray watch`, the same live
view in the terminal."""
