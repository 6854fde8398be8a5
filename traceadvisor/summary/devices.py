"""The report's device figures: the main device's properties and each device's busy time in the window."""

from __future__ import annotations

from traceadvisor.report.model import DeviceInfo, DeviceSummary
from traceadvisor.summary.units import pct, us
from traceadvisor.trace.model import Trace


def main_device(trace: Trace) -> int | None:
    """The device the report's headline figures are about: the busiest (``Trace.device_ids`` order)."""
    return trace.device_ids[0] if trace.device_ids else None


def device_info(trace: Trace, dev: int | None) -> DeviceInfo | None:
    """``traces[].device``: what the trace's ``deviceProperties`` entry says about ``dev`` (its values
    as the trace gave them; a key it lacks stays out of the report)."""
    props = trace.device_properties(dev)
    if props is None and dev is None:
        return None
    if not props:
        return DeviceInfo(id=dev)
    given = {"name"}
    capability = None
    if "computeMajor" in props:
        given.add("compute_capability")
        capability = f"{props.get('computeMajor')}.{props.get('computeMinor')}"
    for src, dst in (("numSms", "sm_count"), ("totalGlobalMem", "memory_bytes")):
        if src in props:
            given.add(dst)
    return DeviceInfo(
        id=dev,
        name=props.get("name"),
        compute_capability=capability,
        sm_count=props.get("numSms"),
        memory_bytes=props.get("totalGlobalMem"),
        given=frozenset(given),
    )


def device_summaries(trace: Trace) -> tuple[DeviceSummary, ...]:
    """``traces[].devices``: busy and idle time of every device inside the analysis window."""
    lo, hi, _ = trace.analysis_window
    window = hi - lo
    out = []
    for dev in trace.device_ids:
        busy = trace.busy_ns(dev, lo, hi)
        kernels = int(((trace.gpu["device"] == dev) & (trace.gpu["kind"] == 0)).sum())
        out.append(DeviceSummary(dev, us(busy), us(window - busy), pct(busy, window), kernels))
    return tuple(out)
