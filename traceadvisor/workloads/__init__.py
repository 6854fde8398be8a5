"""Reference workloads: small programs that each plant one profiling lesson.

Each module exposes ``main(argv)`` and runs a loop whose iterations are profiler steps (marked
with ``traceadvisor.step()``, or by the optimizer step for training loops). ``registry`` lists
them with the lesson each plants and what ``traceadvisor analyze`` should say about its trace.
torch and triton are imported inside functions only, so listing the workloads needs neither.
"""
