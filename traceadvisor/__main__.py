"""``python -m traceadvisor``."""

from traceadvisor.cli import run

run()
