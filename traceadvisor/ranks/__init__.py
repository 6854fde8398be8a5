"""Multi-rank analysis (issue 13): each rank's trace reduced to a small columnar summary
(``summary.py``), the summaries combined in one process (matching collectives across ranks,
clock alignment, waits and transfers, the per-(rank, step) breakdown, stragglers)."""
