"""calc: small helpers for statistics and text."""
