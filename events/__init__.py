"""The event schema of a MAGIS run, its codec and the projectors built from it."""
