"""What-if analyses: a discrete-event replay of a trace's dependency structure (``replay.py``)."""
