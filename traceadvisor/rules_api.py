"""Everything a rule file imports besides the top-level names (kept in one place on purpose)."""

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.engine.rule import DOC_SECTIONS, Capability, Rule, evidence_from, location_of
from traceadvisor.report.finding import Evidence, Finding, Impact, Location, Severity, Thresholds
from traceadvisor.trace.columns import parse_raw
from traceadvisor.trace.cuda_api import BLOCKING_CALLS

__all__ = [
    "BLOCKING_CALLS",
    "DOC_SECTIONS",
    "Capability",
    "Evidence",
    "Finding",
    "Impact",
    "Location",
    "Rule",
    "Severity",
    "Thresholds",
    "category_mask",
    "evidence_from",
    "location_of",
    "parse_raw",
    "signature_codes",
]


def category_mask(names: pd.Series, hit: Callable[[pd.Series], pd.Series]) -> npt.NDArray[np.bool_]:
    """``hit`` (a test on a string Series) applied to a name column. On a categorical column it is
    evaluated once per distinct name, then spread to the rows (kernel names are long templates: a
    regex per row costs seconds on a large trace); rows without a name are ``False``. Any other
    column is tested row by row, as strings."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return np.asarray(hit(names.astype(str)), dtype=bool)
    cats = pd.Series(names.cat.categories.astype(str))
    per_cat = np.append(np.asarray(hit(cats), dtype=bool), False)  # code -1 (no name) → the last slot
    return np.asarray(per_cat[names.cat.codes.to_numpy()], dtype=bool)


def signature_codes(host: pd.DataFrame, pos: npt.NDArray[np.intp], cols: Sequence[str]) -> npt.NDArray[np.intp]:
    """For host rows at positions ``pos``: the index of each row's distinct (name, *cols) signature,
    numbered in order of first appearance."""
    parts = [host["name"].cat.codes.to_numpy()[pos].astype(np.int64)]
    for col in cols:
        parts.append(pd.factorize(host[col].to_numpy()[pos], use_na_sentinel=False)[0].astype(np.int64))
    key = pd.MultiIndex.from_arrays(parts)
    return np.asarray(pd.factorize(key)[0], dtype=np.intp)
