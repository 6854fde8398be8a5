"""Kernel and op names normalised for joining two runs.

The same kernel differs between builds in its template arguments and parameter list (a CUTLASS
or ATen kernel instantiated for another tile or dtype is the same work in a diff) and in hash
suffixes (``## Call CompiledFxGraph <hash>``: Inductor names the compiled graph by a hash of its
code, which changes with any edit). Triton kernels are kept by their name (``triton_poi_fused_add_0``:
Inductor's name says which ops were fused and the ``_N`` counter distinguishes kernels of one graph).
"""

from __future__ import annotations

import re

_HEX = re.compile(r"0x[0-9a-fA-F]+")
# a run of >= 16 letters and digits holding a digit: a content hash (Inductor's are 52 base-32 chars)
_HASH = re.compile(r"\b(?=[a-z0-9]*\d)[a-z0-9]{16,}\b")
_SPACES = re.compile(r"\s+")


def _strip_brackets(name: str, open_: str, close: str) -> str:
    out, depth = [], 0
    for c in name:
        if c == open_:
            depth += 1
        elif c == close and depth:
            depth -= 1
        elif not depth:
            out.append(c)
    return "".join(out)


def normalise(name: str) -> str:
    """``name`` without template arguments, parameter list and hash suffixes."""
    if name.startswith("triton_"):
        return name
    out = _strip_brackets(name, "<", ">") if "<" in name and not name.startswith(("aten::", "## ")) else name
    if "(" in out and not out.startswith("## "):
        out = _strip_brackets(out, "(", ")")
    out = _HASH.sub("<hash>", _HEX.sub("<hex>", out))
    out = _SPACES.sub(" ", out).strip()
    return out.removeprefix("void ") or name
