"""A small MLP trained with AdamW on one fixed batch: a training step stepped by its optimizer.

``Linear → GELU`` blocks (``--depth`` hidden layers of ``--width``), cross-entropy over
``--classes`` classes, ``AdamW``; the batch is made once on the device, so no copy or data loader
takes part. Each iteration is ``zero_grad``, forward, backward, ``optimizer.step()``; the
workload calls no step marker: under ``traceadvisor capture`` the optimizer step marks the
profiler steps, as it does in an unmodified training script.

## Lesson
A model this small is launch-bound: each step launches a few dozen kernels of a few microseconds
each, and the host takes longer to issue them (Python, autograd, the optimizer's loops) than
the GPU to run them, so the GPU idles between kernels however fast it is. Bigger batches, CUDA
graphs (``torch.compile(mode="reduce-overhead")``) or a fused optimizer raise the work per launch.

## What analyze should say
Steps come from the optimizer (``ProfilerStep#N`` around each ``Optimizer.step#AdamW.step``); the
GPU is busy for a small fraction of each step, and the launch-overhead (GK102) and/or idle-gap
(GK101) rules explain the idle time as launch latency. The annotation table shows the optimizer
step and ``zero_grad`` among the step's GPU time.
"""

from __future__ import annotations

import argparse

from traceadvisor.workloads import harness

NAME = "mlp-train"


def parser() -> argparse.ArgumentParser:
    """Options: ``--batch``, ``--width``, ``--depth``, ``--classes``, and the common ones."""
    p = harness.parser(NAME, __doc__)
    p.add_argument("--batch", type=harness.positive_int, default=None, help="batch size (default 64 on GPU, 16 on CPU)")
    p.add_argument(
        "--width", type=harness.positive_int, default=None, help="hidden width (default 256 on GPU, 32 on CPU)"
    )
    p.add_argument("--depth", type=harness.positive_int, default=4, help="hidden layers (default 4)")
    p.add_argument("--classes", type=harness.positive_int, default=10, help="output classes (default 10)")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    return p


def build(args: argparse.Namespace) -> harness.Step:
    """Make the model, optimizer and batch; return one training iteration (it returns the loss tensor)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    dev = harness.device(args.device)
    harness.seed(args.seed)
    batch = harness.pick(dev, args.batch, 64, 16)
    width = harness.pick(dev, args.width, 256, 32)
    layers: list[nn.Module] = [nn.Linear(width, width)]
    for _ in range(args.depth):
        layers += [nn.GELU(), nn.Linear(width, width)]
    layers += [nn.GELU(), nn.Linear(width, args.classes)]
    model = nn.Sequential(*layers).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    x = torch.randn(batch, width, device=dev)
    y = torch.randint(0, args.classes, (batch,), device=dev)

    def step() -> object:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        return loss.detach()

    return step


def main(argv: list[str]) -> None:
    """Run the workload as ``traceadvisor capture --workload mlp-train [ARGS]`` does (no step markers)."""
    harness.main(parser, build, argv, marks_steps=False)
