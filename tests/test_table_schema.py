"""One table schema (trace/tables.py): the empty tables, the Python column builders, the C decoder and
the tables both decoders load from real traces all agree with it, and a disagreement is named.

Each agreement check is paired with a test that feeds it a wrong table (or a wrong ``ColSpec``
array) and shows the difference is caught, so none of them can pass by checking nothing.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixture_paths import FIXTURE_TRACES, HTA, external_traces

from traceadvisor.trace import native
from traceadvisor.trace.columns import ColumnSink
from traceadvisor.trace.load import load_file
from traceadvisor.trace.parallel import _read_serial
from traceadvisor.trace.reader import DEFAULT_MAX_INFLATED_BYTES
from traceadvisor.trace.tables import (
    FAMILIES,
    NATIVE_KIND,
    TABLES,
    column_names,
    columns,
    decoded,
    empty_table,
    markdown,
    mismatches,
)

TRACES = sorted(FIXTURE_TRACES.glob("*.json.gz")) + external_traces()
KINETO_C = Path(native.__file__).with_name("_kineto.c")
# Events of categories the C decoder does not table come back as JSON and go through the Python
# builders (native.py): "other" (unknown categories) is one.
PYTHON_ONLY = {"other"}


def _python_tables(path: Path) -> tuple[dict[str, list[str]], dict[str, pd.DataFrame]]:
    """The pure-Python decoder's columns as its builders made them, and the tables built from them."""
    sink, _ = _read_serial(path, DEFAULT_MAX_INFLATED_BYTES)
    built = {family: list(cols) for family, cols in sink.parts.items() if cols}
    return built, {family: sink.table(family) for family in list(sink.parts)}


def _signature(table: pd.DataFrame) -> list[tuple[str, str]]:
    out = []
    for name in table.columns:
        dtype = table[name].dtype
        text = f"category[{dtype.categories.dtype}]" if isinstance(dtype, pd.CategoricalDtype) else str(dtype)
        out.append((str(name), text))
    return out


# -- the schema itself -------------------------------------------------------------------------
def test_every_table_is_declared_once_with_unique_columns_and_a_meaning() -> None:
    assert set(FAMILIES) == {
        "host",
        "frames",
        "runtime",
        "gpu",
        "gpu_annotations",
        "syncs",
        "memory",
        "collectives",
        "flows",
        "overhead",
        "other",
    }
    for family, cols in TABLES.items():
        names = [c.name for c in cols]
        assert len(names) == len(set(names)), family
        assert all(c.meaning for c in cols), family
        # the order columns are made in: decoded, then end_ns (computed), then the model's links
        origins = [c.origin for c in cols]
        assert origins == sorted(origins, key=["decoded", "computed", "derived"].index), family
        # every table with a duration has end_ns; instants (memory) and flow ends have neither
        assert ("end_ns" in names) == ("dur_ns" in names), family


def test_the_links_are_declared_as_derived_columns() -> None:
    derived = {(f, c.name) for f, cols in TABLES.items() for c in cols if c.origin == "derived"}
    assert derived == {("gpu", "launch"), ("gpu", "op"), ("runtime", "op")}
    assert "launch" not in column_names("gpu")
    assert column_names("gpu", derived=True)[-2:] == ["launch", "op"]


# -- empty tables ------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_empty_table_follows_the_schema(family: str) -> None:
    table = empty_table(family)
    assert len(table) == 0
    assert mismatches(family, table) == []
    assert list(table.columns) == [c.name for c in columns(family)]


def test_empty_and_loaded_tables_agree_where_they_used_to_differ() -> None:
    """Issue 11: ``end_ns`` was third in an empty table and last in a loaded one, and
    ``other.category`` was pandas' ``str`` when loaded but ``object`` when empty."""
    _, tables = _python_tables(FIXTURE_TRACES / "attention_layer.json.gz")
    for family in ("host", "gpu", "runtime", "other"):
        assert _signature(empty_table(family)) == _signature(tables[family]), family
    assert list(tables["gpu"].columns).index("end_ns") == len(tables["gpu"].columns) - 1
    assert tables["other"]["category"].dtype == np.dtype(object)
    assert isinstance(tables["other"]["category"].iloc[0], str)


# -- mismatches names every kind of difference --------------------------------------------------
def test_mismatches_catches_a_wrong_order_a_missing_column_and_an_extra_one() -> None:
    good = empty_table("gpu")
    cols = list(good.columns)
    moved = good[[cols[0], cols[1], "end_ns", *cols[2:-1]]]  # end_ns where the old empty table had it
    assert mismatches("gpu", moved) == [f"gpu: columns {list(moved.columns)}, schema {cols}"]
    assert mismatches("gpu", good.drop(columns=["bytes"]))
    assert mismatches("gpu", good.assign(extra=np.empty(0, np.int64)))
    # a loaded table has no links yet; a Trace's table must have them
    assert mismatches("gpu", good, derived=True)


def test_mismatches_catches_wrong_dtypes_and_index() -> None:
    good = empty_table("other")
    assert mismatches("other", good) == []
    as_str = good.assign(category=pd.Series([], dtype="string"))
    assert mismatches("other", as_str) == ["other.category: dtype string, schema object (text)"]
    assert mismatches("other", good.assign(ts_ns=good["ts_ns"].astype(np.float64))) == [
        "other.ts_ns: dtype float64, schema int64 (int64)"
    ]
    plain_names = good.assign(name=np.empty(0, object))
    assert mismatches("other", plain_names) == ["other.name: dtype object, schema category"]
    str_categories = good.assign(name=pd.Categorical([], categories=pd.Index([], dtype="string")))
    assert mismatches("other", str_categories) == ["other.name: categories string, schema object"]
    relabelled = pd.DataFrame({"ts_ns": [5], "dur_ns": [1], "name": ["k"], "category": ["c"], "end_ns": [6]})
    relabelled = relabelled.astype({"name": pd.CategoricalDtype(pd.Index(["k"], dtype=object)), "category": object})
    assert mismatches("other", relabelled) == []
    assert mismatches("other", relabelled.set_axis([7])) == ["other: index Index, schema RangeIndex"]


# -- the Python builders and the tables both decoders load --------------------------------------
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_python_builders_and_loaded_tables_follow_the_schema(path: Path) -> None:
    built, tables = _python_tables(path)
    for family, names in built.items():
        assert names == [c.name for c in decoded(family)], f"{path.name}: {family} builder"
    for family, table in tables.items():
        if len(table):
            assert mismatches(family, table) == [], path.name


def test_the_real_traces_cover_every_table() -> None:
    """So the test above checks the builder of every table, not only the common ones."""
    seen: set[str] = set()
    for path in TRACES:
        _, tables = _python_tables(path)
        seen.update(family for family, table in tables.items() if len(table))
    assert seen == set(FAMILIES)


def test_a_builder_out_of_step_with_the_schema_is_refused() -> None:
    sink = ColumnSink()
    sink._append("overhead", {"ts_ns": np.array([1000]), "name": np.array([0], np.int32), "dur_ns": np.array([5])})
    sink.interner("overhead").encode(["x"])
    with pytest.raises(RuntimeError, match="overhead table built with columns"):
        sink.table("overhead")


@pytest.mark.skipif(not native.available(), reason="native decoder not built")
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_native_tables_have_the_python_tables_layout(path: Path) -> None:
    got = native.read_native(path, DEFAULT_MAX_INFLATED_BYTES)
    assert got is not None, f"{path.name}: the native decoder refused a real trace"
    sink, _ = got
    _, python = _python_tables(path)
    for family in list(sink.parts):
        table = sink.table(family)
        assert _signature(table) == _signature(python[family]), f"{path.name}: {family}"
        if len(table):
            assert mismatches(family, table) == [], path.name


# -- a Trace's tables, with the links the model adds --------------------------------------------
def test_trace_tables_follow_the_schema_with_the_derived_columns() -> None:
    trace = load_file(FIXTURE_TRACES / "attention_layer.json.gz")
    for family in FAMILIES:
        assert mismatches(family, getattr(trace, family), derived=True) == [], family
    assert len(trace.gpu) and len(trace.syncs) and not len(trace.memory)  # loaded and empty ones both


# -- the C decoder's ColSpec arrays ---------------------------------------------------------------
_COLSPEC = re.compile(r"static const ColSpec (\w+)\[\] = \{(.*?)\{NULL, 0\}\};", re.S)
_ENTRY = re.compile(r'\{"(\w+)", \'(.)\'\}')
_ARRAY_LIST = re.compile(r"static const (?:char|ColSpec) \*(\w+)\[F_COUNT\] = \{(.*?)\};", re.S)


def c_columns(source: str) -> dict[str, list[tuple[str, str]]]:
    """Each family's ``(column, kind letter)`` list as _kineto.c declares it."""
    arrays = {name: _ENTRY.findall(body) for name, body in _COLSPEC.findall(source)}
    lists = {name: re.findall(r'"?(\w+)"?', body) for name, body in _ARRAY_LIST.findall(source)}
    families, specs = lists["FAMILY_NAMES"], lists["FAMILY_COLS"]
    assert len(families) == len(specs)
    return {family: arrays[spec] for family, spec in zip(families, specs, strict=True)}


def c_mismatches(source: str) -> list[str]:
    declared = c_columns(source)
    out = []
    if set(declared) != set(FAMILIES) - PYTHON_ONLY:
        out.append(f"families {sorted(declared)}, schema {sorted(set(FAMILIES) - PYTHON_ONLY)}")
    for family, cols in declared.items():
        want = [(c.name, NATIVE_KIND[c.kind]) for c in decoded(family)] if family in TABLES else []
        if cols != want:
            out.append(f"{family}: _kineto.c {cols}, schema {want}")
    return out


def test_the_c_decoder_declares_the_schemas_columns() -> None:
    source = KINETO_C.read_text()
    assert c_mismatches(source) == []
    assert c_columns(source)["gpu"][:4] == [("ts_ns", "q"), ("dur_ns", "q"), ("name", "i"), ("kind", "b")]


def test_a_c_decoder_out_of_step_is_caught() -> None:
    source = KINETO_C.read_text()
    swapped = source.replace("{\"py_id\", 'q'}, {\"py_parent\", 'q'}", "{\"py_parent\", 'q'}, {\"py_id\", 'q'}")
    assert swapped != source
    assert c_mismatches(swapped) == [
        "frames: _kineto.c "
        + str([(n, k) for n, k in c_columns(swapped)["frames"]])
        + ", schema "
        + str([(c.name, NATIVE_KIND[c.kind]) for c in decoded("frames")])
    ]
    rekinded = source.replace("{\"registers\", 'd'}", "{\"registers\", 'q'}")
    assert rekinded != source and [m.split(":")[0] for m in c_mismatches(rekinded)] == ["gpu"]


@pytest.mark.skipif(not native.available(), reason="native decoder not built")
def test_the_built_decoder_exports_the_schemas_columns_and_kinds() -> None:
    """The compiled module, not only its source: what ``Decoder.export`` hands native.py."""
    data = gzip.decompress((HTA / "nccl_data.json.gz").read_bytes())
    start = data.index(b"[", data.index(b'"traceEvents"')) + 1
    decoder = native._kineto.Decoder()
    decoder.feed(data, start, len(data), True)
    exported = {family: [(n, k) for n, k, _ in cols] for family, _, cols in decoder.export()["families"]}
    assert "collectives" in exported and "host" in exported
    for family, cols in exported.items():
        assert cols == [(c.name, NATIVE_KIND[c.kind]) for c in decoded(family)], family
    # every kind letter the schema uses is one native.py converts
    assert set(NATIVE_KIND.values()) <= set(native._DTYPES) | {"R", "S"}


# -- the reference page --------------------------------------------------------------------------
def test_docs_page_is_the_schema() -> None:
    """docs/tables.md is generated from the schema (``python -m traceadvisor.trace.tables``)."""
    page = (FIXTURE_TRACES.parents[1] / "docs" / "tables.md").read_text()
    generated = markdown()
    assert page.endswith(generated), "docs/tables.md is stale: regenerate its tables"
    assert "| `op` | int64 | derived |" in generated
    assert markdown().count("### ") == len(FAMILIES)
