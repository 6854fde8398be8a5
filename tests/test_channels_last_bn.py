"""channels-last's batch-norm model on the GPU pairs of run 23 (fixtures/pairs12_runs/run_23, H200):
conv_cl_gpu (fit: the constant NHWC_BN_EFFICIENCY was fitted on its after traces alone) and
resnet50_cl (validation: torchvision ResNet-50, fp32, batch 128, the conv-net trainer of issue 12),
both GPU-bound, where cuDNN's NCHW batch norm is half of what channels_last saves."""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from traceadvisor.trace.load import load_file
from traceadvisor.trace.model import Trace
from traceadvisor.whatif import precision
from traceadvisor.whatif.precision import NHWC_BN_EFFICIENCY, nhwc_batch_norm_ns
from traceadvisor.whatif.savings import saving_of, scenario_saving

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "fixtures" / "pairs12_runs" / "run_23"


@cache
def _pairs() -> dict[str, dict[str, object]]:
    return dict(json.loads((RUN / "pairs12.json").read_text())["pairs"])


@cache
def _trace(pair: str, side: str, capture: str = "") -> Trace:
    return load_file(RUN / "traces" / f"p12_{pair}_{side}_stack{capture}.json.gz")


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("channels_last_bn", REPO / "bench" / "channels_last_bn.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_constant_is_what_the_fit_pair_gives() -> None:
    # refitted from the traces: a changed model or fixture that moves the fit makes this fail
    assert _bench().fitted_efficiency() == pytest.approx(NHWC_BN_EFFICIENCY, abs=0.005)
    assert _pairs()["conv_cl_gpu"]["split"] == "fit" and _pairs()["resnet50_cl"]["split"] == "validation"


def test_validation_nhwc_batch_norm_time_matches_the_after_trace() -> None:
    # resnet50_cl (validation): the model's NHWC batch-norm time from the BEFORE trace's NCHW kernels
    # against the AFTER trace's measured persistent kernels
    before, after = _trace("resnet50_cl", "before"), _trace("resnet50_cl", "after")
    model = nhwc_batch_norm_ns(before)
    assert len(model) > 100
    nchw = float(before.kernels.loc[list(model), "dur_ns"].sum())
    measured, _ = _bench().nhwc_kernels(after, precision.streaming_bandwidth(before))
    assert measured < 0.7 * nchw  # the persistent kernels are much faster than the NCHW ones...
    assert sum(model.values()) == pytest.approx(measured, rel=0.05)  # ...and the model says by how much


def test_after_traces_have_no_nchw_batch_norm_to_replace() -> None:
    assert nhwc_batch_norm_ns(_trace("resnet50_cl", "after")) == {}
    assert nhwc_batch_norm_ns(_trace("conv_cl_gpu", "after")) == {}


@pytest.mark.parametrize("capture", ["", "_c1", "_c2"])
def test_resnet50_channels_last_saving_comes_true_and_needs_the_batch_norm(capture: str) -> None:
    measured = float(_pairs()["resnet50_cl"]["measured_saving_pct"])  # type: ignore[arg-type]
    trace = _trace("resnet50_cl", "before", capture)
    s = scenario_saving(trace, "channels-last")
    assert s.refused is None
    assert abs(s.share_pct - measured) <= 0.2 * measured, (s.share_pct, measured)
    # the transposes alone (the model before run 23) predicted under half of it
    ov = precision.channels_last(trace)
    bn = set(nhwc_batch_norm_ns(trace))
    without = type(ov)(
        gpu_dur_ns={r: d for r, d in ov.gpu_dur_ns.items() if r not in bn},
        gpu_delay_ns=ov.gpu_delay_ns,
        host_removed=ov.host_removed,
    )
    assert saving_of(trace, "channels-last without batch norm", without).share_pct < 0.5 * measured


def test_batch_norm_without_shapes_is_left_as_measured() -> None:
    trace = load_file(RUN / "traces" / "p12_resnet50_cl_before_stack.json.gz")  # not the cached one
    host = trace.host.copy()
    host["input_dims"] = None
    trace.host = host
    assert nhwc_batch_norm_ns(trace) == {}
