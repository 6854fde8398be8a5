"""The report's per-trace sections, each built by one small module from the trace and its analyses:
``devices`` (device, window, busy time), ``steps``, ``kernels`` (top kernels), ``idle`` (idle time by
cause and the rule that claims each), ``roofline``, ``annotations`` (time per user annotation and the
bottleneck advice). Each returns the typed part of ``report.model``; ``pipeline`` assembles the
``TraceSummary``.

Times are microseconds as floats computed from exact nanoseconds (``units.us``: ``ns / 1000``), so
the three nanosecond decimals survive.
"""
