"""``traceadvisor capture``: run an unmodified script under a scheduled ``torch.profiler``.

The modules here import torch only inside functions, so ``import traceadvisor`` (and the analysis
path) never pulls it in: ``marker`` (``traceadvisor.step()``), ``options`` (schedule and flags),
``target`` (running a script or module as python would), ``stepon`` (``--step-on``), ``steps``
(when a profiler step ends), ``hooks`` (the torch hooks that feed it), ``window`` (the time window
for scripts without steps), ``runinfo`` (the run folder and ``run.json``), ``session`` (the
profiler itself) and ``command`` (the CLI).
"""
