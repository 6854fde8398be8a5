"""What every workload shares: options, device choice, Triton on the CPU, result checks, the step loop.

A workload module provides ``parser()`` (its options), ``build(args)`` (allocates the data, checks
the result once against a torch reference and returns the function that runs one iteration) and
``main(argv)``, which is ``harness.main`` over those two. Keeping ``build`` separate lets a
harness that drives its own profiler (``bench/gpu_workloads.py``) run the same iterations.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

Step = Callable[[], object]
Build = Callable[[argparse.Namespace], Step]

DEVICES = ("auto", "cuda", "cpu")


class WorkloadError(Exception):
    """A workload that cannot run as asked, or computed a wrong result."""


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def parser(name: str, doc: str | None, steps: int = 15) -> argparse.ArgumentParser:
    """An argument parser with the options every workload has (``--device``, ``--steps``, ``--seed``)."""
    summary = (doc or "").strip().splitlines()[0] if doc else None
    p = argparse.ArgumentParser(prog=f"traceadvisor capture --workload {name}", description=summary)
    p.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where to run: cuda if a GPU is available (auto), else the CPU with small sizes",
    )
    p.add_argument("--steps", type=positive_int, default=steps, help=f"iterations to run (default {steps})")
    p.add_argument("--seed", type=int, default=0, help="random seed of the inputs")
    return p


def device(choice: str) -> str:
    """``cuda`` or ``cpu`` for a ``--device`` choice."""
    import torch

    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise WorkloadError("--device cuda was asked for, but torch sees no CUDA GPU")
    return choice


def pick(dev: str, value: Any, gpu: Any, cpu: Any) -> Any:
    """``value`` when the user gave one, else the size for this device (CPU sizes keep CI fast)."""
    if value is not None:
        return value
    return gpu if dev == "cuda" else cpu


def triton_for(dev: str) -> ModuleType:
    """The ``triton`` module, in interpreter mode when the kernels must run on the CPU.

    Triton decides when it is imported whether its own library functions (``tl.sum``, ``tl.max``,
    ...) are compiled or interpreted, from ``TRITON_INTERPRET``; so the variable is set before the
    first import, and a triton imported earlier without it cannot run kernels on the CPU.
    """
    if dev == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        if "triton" in sys.modules and not _library_interpreted(sys.modules["triton"]):
            raise WorkloadError(
                "triton was imported before TRITON_INTERPRET=1 was set, so it cannot run kernels on the CPU; "
                "set TRITON_INTERPRET=1 in the environment"
            )
        os.environ["TRITON_INTERPRET"] = "1"
    import triton

    module: ModuleType = triton
    if dev == "cpu" and not _library_interpreted(module):
        raise WorkloadError(
            "triton was imported before TRITON_INTERPRET=1 was set, so it cannot run kernels on the CPU; "
            "set TRITON_INTERPRET=1 in the environment"
        )
    return module


def _library_interpreted(triton: ModuleType) -> bool:
    """Whether triton's library functions were built for the interpreter (``TRITON_INTERPRET=1`` at import)."""
    fn = getattr(getattr(triton, "language", None), "sum", None)
    return type(fn).__name__ == "InterpretedFunction"


def interpreting() -> bool:
    """Whether ``@triton.jit`` now builds interpreted kernels (the key of the per-mode kernel caches)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def check(what: str, got: Any, want: Any, atol: float, rtol: float) -> None:
    """Raise ``WorkloadError`` unless ``got`` matches the torch reference ``want``."""
    import torch

    got32, want32 = got.float(), want.float()
    if got32.shape != want32.shape:
        raise WorkloadError(f"{what}: result shape {tuple(got32.shape)} differs from the reference {tuple(want.shape)}")
    if not torch.allclose(got32, want32, atol=atol, rtol=rtol):
        err = (got32 - want32).abs().max().item()
        raise WorkloadError(f"{what}: result differs from the torch reference (max abs error {err:.3g})")


def seed(value: int) -> None:
    """Seed torch's generators (all devices)."""
    import torch

    torch.manual_seed(value)


def loop(step: Step, steps: int, dev: str, marks_steps: bool = True) -> None:
    """Run ``steps`` iterations; each ends with ``traceadvisor.step()`` unless the optimizer marks steps.

    The iterations do not synchronise with the GPU (that would plant a sync finding); one
    synchronise after the loop lets the last kernels finish inside the profiled window.
    """
    import torch

    import traceadvisor

    for _ in range(steps):
        step()
        if marks_steps:
            traceadvisor.step()
    if dev == "cuda":
        torch.cuda.synchronize()


def main(
    make_parser: Callable[[], argparse.ArgumentParser], build: Build, argv: list[str], marks_steps: bool = True
) -> None:
    """Parse ``argv``, build the workload and run its loop; errors exit like a script's, in one line."""
    p = make_parser()
    args = p.parse_args(argv)
    try:
        step = build(args)
        loop(step, args.steps, device(args.device), marks_steps=marks_steps)
    except WorkloadError as exc:
        p.exit(1, f"{p.prog}: error: {exc}\n")
