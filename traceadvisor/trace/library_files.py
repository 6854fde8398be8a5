"""Which source files are library code, not the user's (issue 12 item 8): no pandas, no numpy, so
capture's sync-site hook can ask it inside the user's process without importing the analysis stack
(importing pandas alone slowed a small training loop by 1-3%: bench/after_window_overhead.py)."""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

# Installed libraries a training or inference program calls, by top-level import name. A relative
# frame path starting with one of them is that library's file (the profiler stripped the
# site-packages folder it lives in). traceadvisor is here too: its capture hooks and workloads run
# inside the user's process.
LIBRARY_PACKAGES = frozenset(
    {
        "torch", "torchvision", "torchaudio", "torchtext", "torchdata", "torchrec", "torchao", "torchtune",
        "functorch", "triton", "numpy", "scipy", "pandas", "PIL", "cv2", "sklearn",
        "transformers", "tokenizers", "datasets", "accelerate", "peft", "diffusers", "timm",
        "huggingface_hub", "safetensors", "evaluate", "trl", "sentence_transformers",
        "lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities", "torchmetrics",
        "deepspeed", "megatron", "apex", "fairscale", "xformers", "flash_attn", "flashinfer", "liger_kernel",
        "vllm", "sglang", "bitsandbytes", "einops", "thunder", "torch_tensorrt", "tensorrt", "onnx",
        "onnxruntime", "nvtx", "cupy", "jax", "jaxlib", "tensorboard", "wandb", "mlflow", "hydra", "omegaconf",
        "tqdm", "typing_extensions", "sympy", "networkx", "filelock", "fsspec", "jinja2", "packaging",
        "six", "setuptools", "pkg_resources", "_pytest", "pytest", "pluggy", "IPython", "ipykernel",
        "tornado", "zmq", "traceadvisor", "typer", "click", "rich", "shellingham",
        # start-up hooks installed packages put on sys.path (.pth files): setuptools' distutils shim,
        # virtualenv's, numba-cuda's import redirector (seen in a capture's stack on the H100 machine)
        "_distutils_hack", "_virtualenv", "_numba_cuda_redirector",
    }
)  # fmt: skip
# Standard-library modules (threading.py, contextlib.py, logging/...), less the few whose names a
# user's own script commonly has (``python profile.py``) and that a training loop never calls into.
STDLIB_MODULES = frozenset(sys.stdlib_module_names) - {"profile", "trace", "test", "code"}
_LIBRARY_FOLDERS = frozenset({"site-packages", "dist-packages"})
# ``lib/python3.11/`` (also ``python3.13t``, ``lib64``): the standard library's own folder.
_STDLIB_FOLDER = re.compile(r"(^|/)lib(64)?/python\d+(\.\d+)?t?(/|$)")
# Console scripts installed by libraries (``<prefix>/bin/NAME``: pip writes a stub that imports the
# package's entry point): a program started as ``torchrun train.py`` or ``traceadvisor capture``
# has the stub as its outermost frame. Matched only inside a ``bin`` folder, so a user's own
# ``bin/train`` stays the user's.
CONSOLE_SCRIPTS = LIBRARY_PACKAGES | frozenset(
    {"torchrun", "huggingface-cli", "accelerate-launch", "deepspeed", "ipython", "jupyter", "py.test", "python"}
)
# Pseudo-files of code without a source file of the user's: frozen and built-in modules, and code
# compiled from a string (dataclasses' generated __init__/__hash__, namedtuple, torch's launchers).
_PSEUDO_FILES = ("<frozen ", "<built-in", "<string>")


def is_library_file(path: str) -> bool:
    """Whether a frame's file (as the profiler names it) is library code, by its path segments."""
    if path.startswith(_PSEUDO_FILES):
        return True
    p = path.replace("\\", "/")  # a trace from Windows
    segments = [s for s in p.split("/") if s not in ("", ".")]
    if not segments:
        return False
    if _LIBRARY_FOLDERS.intersection(segments) or _STDLIB_FOLDER.search(p):
        return True
    # TorchInductor's generated code lives in its cache, /tmp/torchinductor_<user>/ by default
    # (torch/_inductor/runtime/cache_dir_utils.py).
    if any(s.startswith("torchinductor_") for s in segments):
        return True
    if len(segments) >= 2 and segments[-2] == "bin" and segments[-1].removesuffix(".py") in CONSOLE_SCRIPTS:
        return True
    if _in_own_source_tree(tuple(segments)):
        return True
    if p.startswith("/"):
        return False  # an absolute path outside those folders: the user's
    first = segments[0].removesuffix(".py")
    return first in LIBRARY_PACKAGES or first in STDLIB_MODULES


# traceadvisor's own package folder: a source checkout run in place (``python -m traceadvisor
# capture`` from the repository) puts its frames at an absolute path outside any site-packages
# (fixtures/traces/capture_power_capped_loop.json.gz: <checkout>/traceadvisor/capture/command.py).
_OWN_PACKAGE = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=4096)
def _in_own_source_tree(segments: tuple[str, ...]) -> bool:
    """Whether the path is a file of traceadvisor's own package: a ``traceadvisor`` segment whose
    tail names a file this package has (so a user's project folder named traceadvisor is not)."""
    for i, s in enumerate(segments[:-1]):
        if s == "traceadvisor" and (_OWN_PACKAGE / "/".join(segments[i + 1 :])).is_file():
            return True
    return False
