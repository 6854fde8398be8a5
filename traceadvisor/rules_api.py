"""The one module a rule file imports: everything a rule needs, and nothing it should not lean on.

Built-in rules (``rules/*.py``) import only from here (``tests/test_import_contracts.py`` fails
on any other ``traceadvisor.*`` import in them), and so can a user's rules: what is exported here
keeps its name and meaning across releases; the modules behind it may move.

- the rule itself: ``Rule`` (``class MyRule(Rule[Options])``), ``Capability``, ``IdleCause``,
  ``DOC_SECTIONS``;
- what it reads: ``Trace`` (the data model) and the analyses of a trace, each computed once per
  trace and shared with the report (``intervals`` is the interval arithmetic on sorted arrays);
- what it yields: ``Finding``, ``Evidence``, ``Impact``, ``Location``, ``Severity``,
  ``Thresholds`` (usually through ``self.finding(...)``, ``evidence_from``, ``location_of``);
- the names in a Kineto trace that rules match on (``BLOCKING_CALLS``, ``GRAPH_LAUNCHES``,
  ``MULTI_TENSOR_MARKS``) and the profiler's own cost per recorded event.
"""

from traceadvisor.analyses.communication import communication_kernels
from traceadvisor.analyses.copies import PINNED_GBPS_PCIE4, PINNED_GBPS_PCIE5, PINNED_MEASURED_FACTOR, pinned_rate
from traceadvisor.analyses.idle import (
    GRAPH_LAUNCHES,
    MULTI_TENSOR_MARKS,
    PROFILER_EVENT_COST_NS,
    IdleCause,
    idle_attribution,
    recoverable_ns,
)
from traceadvisor.engine.rule import (
    DOC_SECTIONS,
    Capability,
    NoOptions,
    RankRule,
    Rule,
    evidence_from,
    location_of,
    trace_capabilities,
)
from traceadvisor.ranks.bandwidth import bandwidth_table, bucket_label, size_bucket
from traceadvisor.ranks.combine import RankRun
from traceadvisor.ranks.straggler import IMPLICIT_SYNC, Straggler
from traceadvisor.report.finding import Evidence, Finding, Impact, Location, Severity, Thresholds
from traceadvisor.roofline.models import op_work
from traceadvisor.roofline.view import LATENCY_FLOOR_NS, MAX_INPUT_LINKS
from traceadvisor.roofline.view import of as roofline_of
from traceadvisor.rule_helpers import (
    PROFILER_EVENT_US,
    ClaimedIdle,
    at_source,
    busy_in_windows,
    category_mask,
    cause_name,
    distinct_signatures,
    event_location,
    evidence_of,
    fmt_ms,
    fmt_ns,
    fmt_time,
    fmt_us,
    idle_of,
    in_steps,
    launch_location,
    names_at,
    op_location,
    pct,
    per_step,
    plural,
    profiler_ns_in_spans,
    recoverable_ns_per_gap,
    recoverable_per_gap,
    replay_basis,
    share_of_steps,
    share_of_steps_text,
    signature_codes,
    step_positions,
    steps_on_gpu,
    sync_location,
    unprofiled_idle_cap_ns,
    us,
    worth_reporting,
)
from traceadvisor.trace import intervals
from traceadvisor.trace.columns import parse_raw
from traceadvisor.trace.cuda_api import BLOCKING_CALLS
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.alignment import unaligned_products
from traceadvisor.whatif.fusion import fusible_kernels, fusion_chains
from traceadvisor.whatif.power_limit import KEPT_SPAN_MEASURED as POWER_KEPT_SPAN_MEASURED
from traceadvisor.whatif.power_limit import give_back as power_give_back
from traceadvisor.whatif.power_limit import unprofiled_capped as power_capped_unprofiled
from traceadvisor.whatif.precision import layout_transposes, matrix_kernels, nhwc_batch_norm_ns
from traceadvisor.whatif.profiler_cost import gpu_power_state, measured_unprofiled_ns
from traceadvisor.whatif.replay import Overrides
from traceadvisor.whatif.savings import Saving, leaves_gpu_bound, predicted_step_ns, saving_of, scenario_saving
from traceadvisor.whatif.scenarios import runs_compiled

__all__ = [
    "BLOCKING_CALLS",
    "DOC_SECTIONS",
    "GRAPH_LAUNCHES",
    "IMPLICIT_SYNC",
    "LATENCY_FLOOR_NS",
    "MAX_INPUT_LINKS",
    "MULTI_TENSOR_MARKS",
    "PINNED_GBPS_PCIE4",
    "PINNED_GBPS_PCIE5",
    "PINNED_MEASURED_FACTOR",
    "POWER_KEPT_SPAN_MEASURED",
    "PROFILER_EVENT_COST_NS",
    "PROFILER_EVENT_US",
    "Capability",
    "ClaimedIdle",
    "Evidence",
    "Finding",
    "IdleCause",
    "Impact",
    "Location",
    "NoOptions",
    "Overrides",
    "RankRule",
    "RankRun",
    "Rule",
    "Saving",
    "Severity",
    "Straggler",
    "Thresholds",
    "Trace",
    "at_source",
    "bandwidth_table",
    "bucket_label",
    "busy_in_windows",
    "category_mask",
    "cause_name",
    "communication_kernels",
    "distinct_signatures",
    "event_location",
    "evidence_from",
    "evidence_of",
    "fmt_ms",
    "fmt_ns",
    "fmt_time",
    "fmt_us",
    "fusible_kernels",
    "fusion_chains",
    "gpu_power_state",
    "idle_attribution",
    "idle_of",
    "in_steps",
    "intervals",
    "launch_location",
    "layout_transposes",
    "leaves_gpu_bound",
    "location_of",
    "matrix_kernels",
    "measured_unprofiled_ns",
    "names_at",
    "nhwc_batch_norm_ns",
    "op_location",
    "op_work",
    "parse_raw",
    "pct",
    "per_step",
    "pinned_rate",
    "plural",
    "power_capped_unprofiled",
    "power_give_back",
    "predicted_step_ns",
    "profiler_ns_in_spans",
    "recoverable_ns",
    "recoverable_ns_per_gap",
    "recoverable_per_gap",
    "replay_basis",
    "roofline_of",
    "runs_compiled",
    "saving_of",
    "scenario_saving",
    "share_of_steps",
    "share_of_steps_text",
    "signature_codes",
    "size_bucket",
    "step_positions",
    "steps_on_gpu",
    "sync_location",
    "trace_capabilities",
    "unaligned_products",
    "unprofiled_idle_cap_ns",
    "us",
    "worth_reporting",
]
