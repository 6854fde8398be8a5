"""``python -m traceadvisor``."""

from traceadvisor.cli import main

main()
