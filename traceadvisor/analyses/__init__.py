"""Analyses of a trace: plain functions of a ``Trace``, each computed once per trace and shared by
every rule and report section (idle attribution, the dependency graph, annotation time, Triton
launch records). The trace model holds data; what is computed from it lives here."""
