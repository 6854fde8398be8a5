"""Which GPU kernels are communication (NCCL/RCCL collectives and point-to-point transfers).

A communication kernel is judged by other rules than compute: NCCL launches one block per channel
(a handful of SMs, by design, so that compute overlaps it), and most of its time is spent waiting
for the other ranks to reach the collective, not moving bytes. Occupancy, the roofline and fusion
advice therefore say nothing true about it (NCCL docs, "NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS":
one CUDA block per channel). One test here, used by every rule and report section that excludes
them.
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.analyses.cache import memoised
from traceadvisor.trace.columns import KERNEL
from traceadvisor.trace.model import Trace

# Kernel names of NCCL (ncclKernel_AllReduce_..., ncclDevKernel_..., ncclSendRecv...) and RCCL
# (the same names on ROCm, and rccl-prefixed ones), matched anywhere in the (possibly mangled or
# templated) name: `_Z...ncclDevKernel...`; and c10d's symmetric-memory collectives
# (`multimem_all_reduce_kernel`, `one_shot_all_reduce_kernel`, ...: NVLink SHARP multicast
# kernels that, like NCCL's, launch few blocks and wait on their peers' signals).
COMMUNICATION_KERNEL = re.compile(
    r"nccl|rccl|multimem_|\b\w*(?:all_reduce|all_gather|reduce_scatter|all_to_all)\w*_kernel", re.IGNORECASE
)


def is_communication_name(name: str, extra: re.Pattern[str] | None = None) -> bool:
    """Whether a kernel name is an NCCL/RCCL kernel's (or matches the configured ``extra``)."""
    return COMMUNICATION_KERNEL.search(name) is not None or (extra is not None and extra.search(name) is not None)


def extra_pattern(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """The configured extra communication patterns as one case-insensitive regex (None: none)."""
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE) if patterns else None


@memoised
def communication_kernels(trace: Trace) -> pd.Index:
    """Row labels (of ``trace.gpu`` and its views, ``trace.kernels``) of the kernels that are
    communication: ``frame.index.isin(communication_kernels(trace))`` masks any view of them."""
    gpu = trace.gpu
    extra = extra_pattern(trace.communication_patterns)
    return gpu.index[_mask(gpu, trace.collectives, extra)] if len(gpu) else gpu.index[:0]


def _mask(gpu: pd.DataFrame, coll: pd.DataFrame, extra: re.Pattern[str] | None = None) -> npt.NDArray[np.bool_]:
    """True for a kernel that is communication, by its name or because Kineto recorded collective
    args on it (``collectives`` rows with ``on_gpu``, matched by correlation id and start time)."""
    names = gpu["name"]
    if isinstance(names.dtype, pd.CategoricalDtype):
        cats = names.cat.categories.astype(str)
        by_cat = np.fromiter((is_communication_name(c, extra) for c in cats), dtype=bool, count=len(cats))
        codes = names.cat.codes.to_numpy()
        mask = np.where(codes >= 0, by_cat[np.maximum(codes, 0)], False)
    else:
        mask = np.fromiter((is_communication_name(n, extra) for n in names.astype(str)), dtype=bool, count=len(names))
    if len(coll) and coll["on_gpu"].any():
        on = coll[coll["on_gpu"].to_numpy(dtype=bool)]
        keys = pd.MultiIndex.from_arrays([on["correlation"].to_numpy(), on["ts_ns"].to_numpy()])
        mine = pd.MultiIndex.from_arrays([gpu["correlation"].to_numpy(), gpu["ts_ns"].to_numpy()])
        mask = mask | mine.isin(keys)
    return np.asarray(mask & (gpu["kind"].to_numpy() == KERNEL), dtype=bool)
