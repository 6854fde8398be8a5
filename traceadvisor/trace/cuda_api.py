"""Facts about CUDA/HIP runtime calls that the trace model and rules share."""

from __future__ import annotations

# Calls that block the host until queued GPU work is done (CUDA runtime API docs: "synchronous"
# behaviour of cudaMemcpy, cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize;
# HIP mirrors them).
BLOCKING_CALLS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
    "hipEventSynchronize",
    "hipMemcpy",
    "hipMemcpyWithStream",
)
