"""Training-framework callbacks: ``integrations.lightning`` and ``integrations.transformers``.

Each module imports its framework (and torch) only when its callback class is first used.
"""
