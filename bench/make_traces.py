#!/usr/bin/env python3
"""Generate large benchmark traces by replicating the ProfilerStep steps of a real trace.

Source: a real Kineto (PyTorch profiler) Chrome trace, by default HTA's
``nccl_data.json.gz`` (A100 DDP run, 9.8 MB of JSON, ProfilerStep#4-6).

How a trace of N copies is built (N is chosen so the file is about the requested size,
MB = 10**6 bytes):

* The text before and after the ``traceEvents`` array is copied byte for byte, so every
  other top-level key (schemaVersion, deviceProperties, distributedInfo, INFO, traceName,
  displayTimeUnit, baseTimeNanoseconds, ...) is preserved.
* Copy 0 is the source's event array text, byte for byte and in the source order
  (so a 1-copy trace is identical to the source).  Only two edits, both when N > 1: an
  event that starts before the first step and encloses all steps (the ``Trace`` span
  event) gets its ``dur`` extended to cover all copies, and global instant events after
  the first step (``Record Window End``) are moved to the end of the last copy.
* The replicated block is every non-metadata event whose ``ts`` is at or after the start of
  the first ProfilerStep (CPU ops and runtime calls of the steps, their kernels, memcpys,
  flows, the tail after the last step), except global instants.  Copies 1..N-1 are
  appended after copy 0.  Metadata (``ph: "M"``) and pre-step events are kept once.
* Copy k is shifted by ``k * S`` where S (integer ns) is the span of the replicated steps
  (first step start to last step end), raised where needed so that on every (pid, tid)
  lane copy k+1 starts after copy k ends (GPU kernels of the last step run past its
  end).  The shift is done in integer nanoseconds and written as ``ns/1000`` with
  exactly 3 decimals, like the source.
* Ids are made unique per copy by adding ``k * stride`` (stride = next power of ten
  above the family's largest value); negative values are left alone, and so is 0 for the
  correlation family (0 = "no correlation"):
  ``args.correlation``, ``args["External id"]`` and flow ``id`` share one stride (so
  flow id == correlation links stay intact), ``args["Ev Idx"]``,
  ``args["Record function id"]``, ``args["Python id"]``/``args["Python parent id"]``.
  ``ProfilerStep#n`` names are renumbered so that steps keep counting up.
  ``Sequence number`` (autograd) is left unchanged.

The output is streamed: the source (about 10 MB) is parsed once into a text template
and each copy is formatted and written on its own, so memory stays bounded (a few
hundred MB at most) whatever the output size.

Files go to the cache dir (default ``bench/.cache``) as ``<source-stem>.<size>MB.json``
with a ``.marker`` file next to it (JSON: generator version and sha256 of this script,
source sha256, copies, byte size).  A trace is regenerated only when the marker is missing/different or the
file's size does not match the marker.

Only stdlib and orjson are used.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import os
import re
import resource
import sys
import time
from collections import Counter, defaultdict
from decimal import Decimal
from itertools import pairwise
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson

GENERATOR_VERSION = 1
BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_CACHE_DIR = BENCH_DIR / ".cache"
DEFAULT_SOURCE = BENCH_DIR.parent / "fixtures" / "external" / "hta" / "nccl_data.json.gz"
DEFAULT_SIZES = (10, 100, 1000)
MB = 1_000_000

# args keys that hold ids, and the id family (stride group) they belong to
ARG_ID_FAMILY = {
    "correlation": "link",
    "External id": "link",
    "Ev Idx": "evidx",
    "Record function id": "rfid",
    "Python id": "pyid",
    "Python parent id": "pyid",
}
TOP_KEYS = {"ts", "dur", "id", "name"}
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

# one JSON token the scanner cares about: a string literal or a bracket
_TOKEN_RE = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]]')
_COLON_RE = re.compile(r"\s*:\s*")
_NUM_RE = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_STR_RE = re.compile(r'"(?:[^"\\]|\\.)*"')


class SourceError(Exception):
    pass


# --------------------------------------------------------------------------- parsing


def _to_ns(tok: str) -> int:
    """JSON number token in microseconds -> integer nanoseconds (exact for <= 3 decimals)."""
    return int((Decimal(tok) * 1000).to_integral_value())


def _fmt_us(ns: int, decimals: bool) -> str:
    if not decimals and ns % 1000 == 0:
        return str(ns // 1000)
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return f"{sign}{q}.{r:03d}"


def _scan(text: str):
    """Scan the document once.

    Returns (array_open, array_close, events, slots):
      array_open: index just after the '[' of the top-level traceEvents array
      array_close: index of its closing ']'
      events: list of (start, end) spans of each event object
      slots: list per event of (start, end, where, key, token) for the values of
             top-level keys in TOP_KEYS and args keys in ARG_ID_FAMILY, where is
             "top" or "args"; token is the raw value text.
    """
    depth = 0
    array_depth = None  # depth inside traceEvents array (2 when found at top level)
    array_open = array_close = None
    pending_te = False  # saw the key "traceEvents" at depth 1, waiting for '['
    events: list[tuple[int, int]] = []
    slots: list[list[tuple[int, int, str, str, str]]] = []
    ev_start = None
    cur_top_key = None
    for m in _TOKEN_RE.finditer(text):
        tok = m.group()
        c = tok[0]
        if c == '"':
            if array_open is None:
                if depth == 1 and tok == '"traceEvents"':
                    cm = _COLON_RE.match(text, m.end())
                    if cm:
                        pending_te = True
                continue
            if array_close is not None or depth < 3:
                continue
            cm = _COLON_RE.match(text, m.end())
            if not cm:
                continue  # a string value, not a key
            key = tok[1:-1]
            if depth == 3:
                cur_top_key = key
                where = "top"
                wanted = key in TOP_KEYS
            elif depth == 4 and cur_top_key == "args":
                where = "args"
                wanted = key in ARG_ID_FAMILY
            else:
                wanted = False
            if wanted:
                vpos = cm.end()
                vm = (_STR_RE if text.startswith('"', vpos) else _NUM_RE).match(text, vpos)
                if vm:
                    slots[-1].append((vm.start(), vm.end(), where, key, vm.group()))
            continue
        if c in "{[":
            depth += 1
            if pending_te and c == "[" and depth == 2:
                array_open = m.end()
                array_depth = 2
                pending_te = False
            elif array_open is not None and array_close is None and depth == 3 and c == "{":
                ev_start = m.start()
                cur_top_key = None
                slots.append([])
        else:
            if array_open is not None and array_close is None:
                if depth == 3 and c == "}":
                    events.append((ev_start, m.end()))
                elif depth == array_depth and c == "]":
                    array_close = m.start()
            depth -= 1
    if array_open is None or array_close is None:
        raise SourceError("no top-level traceEvents array found")
    return array_open, array_close, events, slots


def _stride(maxval: int) -> int:
    if maxval <= 0:
        return 1
    return 10 ** max(1, math.ceil(math.log10(maxval + 1)))


class Template:
    """Everything needed to write a trace of any number of copies."""

    def __init__(self, source: Path):
        self.source = source
        raw = source.read_bytes()
        self.source_sha256 = hashlib.sha256(raw).hexdigest()
        if source.suffix == ".gz":
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
        del raw
        doc = orjson.loads(text)
        evs = doc["traceEvents"]
        array_open, array_close, spans, slots = _scan(text)
        if len(spans) != len(evs):
            raise SourceError(f"scanner found {len(spans)} events, orjson {len(evs)}")
        if len(spans) < 2:
            raise SourceError("need at least 2 events")

        self.prefix = text[:array_open]
        self.suffix = text[array_close:]
        self.lead = text[array_open : spans[0][0]]  # "\n  " before the first event
        self.trail = text[spans[-1][1] : array_close]  # "\n  " after the last event
        self.sep = text[spans[0][1] : spans[1][0]]  # ",\n  "
        self.copy0_text = text[spans[0][0] : spans[-1][1]]
        copy0_base = spans[0][0]

        # --- steps
        step_nums = []
        s0 = s1 = None
        for e in evs:
            name = e.get("name")
            if e.get("ph") == "X" and isinstance(name, str) and STEP_RE.match(name):
                a = _ns_of(e["ts"])
                b = a + _ns_of(e.get("dur", 0))
                step_nums.append(int(STEP_RE.match(name).group(1)))
                s0 = a if s0 is None else min(s0, a)
                s1 = b if s1 is None else max(s1, b)
        if not step_nums:
            raise SourceError("source has no ProfilerStep#N events")
        self.step_first, self.step_last = min(step_nums), max(step_nums)
        self.step_offset = self.step_last - self.step_first + 1
        self.step_span_ns = s1 - s0

        # --- classify events; use the scanner's raw tokens for exact ns values
        rep_idx = []
        self.enclosing = []  # (slot start, slot end, dur_ns, decimals) in copy0 coords
        self.epilogue = []  # (slot start, slot end, ts_ns, decimals) in copy0 coords
        lanes: dict[Any, list[int]] = {}
        fam_max = {"link": 0, "evidx": 0, "rfid": 0, "pyid": 0}
        n_meta = n_pro = 0
        for i, e in enumerate(evs):
            sl = {(w, k): (a, b, tok) for a, b, w, k, tok in slots[i]}
            ph = e.get("ph")
            tsl = sl.get(("top", "ts"))
            if ph == "M" or tsl is None or not _NUM_RE.fullmatch(tsl[2]):
                n_meta += 1
                continue
            ts = _to_ns(tsl[2])
            dsl = sl.get(("top", "dur"))
            dur = _to_ns(dsl[2]) if dsl and _NUM_RE.fullmatch(dsl[2]) else 0
            if ts < s0:
                n_pro += 1
                if dsl and ts + dur >= s1:
                    self.enclosing.append((dsl[0] - copy0_base, dsl[1] - copy0_base, dur, "." in dsl[2]))
                continue
            if ph in ("i", "I") and e.get("s") == "g":
                self.epilogue.append((tsl[0] - copy0_base, tsl[1] - copy0_base, ts, "." in tsl[2]))
                continue
            rep_idx.append(i)
            lane = lanes.setdefault((str(e.get("pid")), str(e.get("tid"))), [ts, ts + dur])
            lane[0] = min(lane[0], ts)
            lane[1] = max(lane[1], ts + dur)
            for (w, k), (_, _, tok) in sl.items():
                if w == "args" and _NUM_RE.fullmatch(tok) and "." not in tok:
                    fam = ARG_ID_FAMILY[k]
                    fam_max[fam] = max(fam_max[fam], int(tok))
                elif w == "top" and k == "id" and re.fullmatch(r"-?\d+", tok):
                    fam_max["link"] = max(fam_max["link"], int(tok))
        self.n_events = len(evs)
        self.n_meta, self.n_prologue, self.n_epilogue = n_meta, n_pro, len(self.epilogue)
        self.n_replicated = len(rep_idx)
        lane_extent = max(b - a for a, b in lanes.values())
        self.shift_ns = max(self.step_span_ns, lane_extent)
        self.strides = {f: _stride(m) for f, m in fam_max.items()}

        # --- template of the replicated block: literal pieces around value slots
        self._build_rep(text, spans, slots, rep_idx)
        del doc, evs, text

    def _build_rep(self, text, spans, slots, rep_idx):
        """The block is lit0 slot0 lit1 slot1 ... litN (events joined by sep)."""
        lits: list[str] = []
        kinds: list[tuple[str, int]] = []
        cur: list[str] = []
        for j, i in enumerate(rep_idx):
            a, b = spans[i]
            if j:
                cur.append(self.sep)
            pos = a
            for sa, sb, w, k, tok in sorted(slots[i]):
                kind = _slot_kind(w, k, tok)
                if kind is None:
                    continue
                cur.append(text[pos:sa])
                lits.append("".join(cur))
                cur = []
                kinds.append(kind)
                pos = sb
            cur.append(text[pos:b])
        lits.append("".join(cur))
        self.lits = lits
        # group slot base values by kind; `order` maps slot position -> index in the
        # concatenation of the per-kind value lists
        groups: dict[str, list[int]] = {}
        positions: dict[str, list[int]] = {}
        for p, (kind, base) in enumerate(kinds):
            groups.setdefault(kind, []).append(base)
            positions.setdefault(kind, []).append(p)
        self.groups = groups
        order = [0] * len(kinds)
        off = 0
        self.group_order = list(groups)
        for kind in self.group_order:
            for q, p in enumerate(positions[kind]):
                order[p] = off + q
            off += len(groups[kind])
        self.n_slots = len(kinds)
        self._pick = itemgetter(*order) if len(order) > 1 else (lambda s: (s[order[0]],))
        # interleave literals and values with one %-format
        self.fmt = "%s".join(s.replace("%", "%%") for s in lits)

    # ----------------------------------------------------------------- output
    def copy_block(self, k: int) -> str:
        """Text of replicated copy k (k >= 1), no leading separator."""
        vals: list[str] = []
        for kind in self.group_order:
            base = self.groups[kind]
            if kind == "ts3":
                off = k * self.shift_ns
                vals.extend([_fmt_us(t + off, True) for t in base])
            elif kind == "ts0":
                off = k * self.shift_ns
                vals.extend([_fmt_us(t + off, False) for t in base])
            elif kind == "step":
                off = k * self.step_offset
                vals.extend([f'"ProfilerStep#{n + off}"' for n in base])
            else:
                off = k * self.strides[kind]
                vals.extend([str(v + off) for v in base])
        return self.fmt % self._pick(vals)

    def copy0(self, copies: int) -> str:
        """Source events, byte for byte, with the enclosing span and epilogue adjusted."""
        if copies <= 1:
            return self.copy0_text
        edits = []
        total = (copies - 1) * self.shift_ns
        for a, b, dur, dec in self.enclosing:
            edits.append((a, b, _fmt_us(dur + total, dec)))
        for a, b, ts, dec in self.epilogue:
            edits.append((a, b, _fmt_us(ts + total, dec)))
        out, pos = [], 0
        for a, b, s in sorted(edits):
            out.append(self.copy0_text[pos:a])
            out.append(s)
            pos = b
        out.append(self.copy0_text[pos:])
        return "".join(out)

    def estimate_copies(self, target_bytes: int) -> int:
        base = len(self.prefix) + len(self.lead) + len(self.copy0_text) + len(self.trail)
        base += len(self.suffix)
        if target_bytes <= base:
            return 1
        per = len(self.sep) + len(self.copy_block(1).encode())
        return max(1, 1 + round((target_bytes - base) / per))

    def write(self, path: Path, copies: int) -> int:
        """Stream a trace of `copies` copies to path; returns bytes written."""
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        n = 0
        sep = self.sep.encode()
        with tmp.open("wb", buffering=4 << 20) as f:
            for part in (self.prefix, self.lead, self.copy0(copies)):
                n += f.write(part.encode())
            for k in range(1, copies):
                n += f.write(sep)
                n += f.write(self.copy_block(k).encode())
            for part in (self.trail, self.suffix):
                n += f.write(part.encode())
        tmp.replace(path)
        return n

    def describe(self) -> dict:
        return {
            "source": str(self.source),
            "source_sha256": self.source_sha256,
            "events": self.n_events,
            "metadata_or_untimed_events": self.n_meta,
            "prologue_events": self.n_prologue,
            "epilogue_events": self.n_epilogue,
            "replicated_events_per_copy": self.n_replicated,
            "steps": [self.step_first, self.step_last],
            "step_span_ns": self.step_span_ns,
            "shift_ns": self.shift_ns,
            "id_strides": self.strides,
        }


def _ns_of(v) -> int:
    # parsed float -> ns (only used for step bounds; exact tokens are used for output)
    return _to_ns(repr(v)) if isinstance(v, float) else int(v) * 1000


def _slot_kind(w: str, k: str, tok: str):
    if w == "top":
        if k == "ts" and _NUM_RE.fullmatch(tok):
            return ("ts3" if "." in tok else "ts0", _to_ns(tok))
        if k == "id" and tok.isdigit() and int(tok) > 0:
            return ("link", int(tok))
        if k == "name" and tok.startswith('"'):
            sm = STEP_RE.match(tok[1:-1])
            if sm:
                return ("step", int(sm.group(1)))
        return None
    if tok.isdigit():
        fam = ARG_ID_FAMILY[k]
        # 0 means "none" for correlation / External id; it is a real index elsewhere
        if int(tok) > 0 or fam != "link":
            return (fam, int(tok))
    return None


# --------------------------------------------------------------------------- cache


def trace_path(size_mb: int, cache_dir: Path = DEFAULT_CACHE_DIR, source: Path = DEFAULT_SOURCE) -> Path:
    stem = source.name.split(".")[0]
    return Path(cache_dir) / f"{stem}.{size_mb}MB.json"


def _marker_path(path: Path) -> Path:
    return path.with_name(path.name + ".marker")


def _generator_sha() -> str:
    """Hash of this file: any change to the generator invalidates cached traces."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def _source_sha(source: Path) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()


def cached(path: Path, size_mb: int, source_sha: str) -> dict | None:
    """The marker dict when `path` is a complete, current trace for size_mb, else None."""
    try:
        marker = json.loads(_marker_path(path).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return None
    if (
        marker.get("generator_version") == GENERATOR_VERSION
        and marker.get("generator_sha256") == _generator_sha()
        and marker.get("source_sha256") == source_sha
        and marker.get("target_mb") == size_mb
        and marker.get("bytes") == st.st_size
    ):
        return marker
    return None


_TEMPLATES: dict[Path, Template] = {}


def _template(source: Path) -> Template:
    if source not in _TEMPLATES:
        _TEMPLATES[source] = Template(source)
    return _TEMPLATES[source]


def ensure_trace(
    size_mb: int,
    cache_dir: Path = DEFAULT_CACHE_DIR,
    source: Path = DEFAULT_SOURCE,
    force: bool = False,
    log=print,
) -> tuple[Path, dict]:
    """Make sure the trace of about size_mb MB exists; returns (path, marker)."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = trace_path(size_mb, cache_dir, source)
    sha = _source_sha(source)
    marker = None if force else cached(path, size_mb, sha)
    if marker is not None:
        log(f"[make_traces] {path.name}: cached ({marker['bytes'] / MB:.1f} MB, {marker['copies']} copies)")
        return path, marker
    t0 = time.perf_counter()
    tpl = _template(source)
    t_tpl = time.perf_counter() - t0
    copies = tpl.estimate_copies(size_mb * MB)
    _marker_path(path).unlink(missing_ok=True)
    t1 = time.perf_counter()
    nbytes = tpl.write(path, copies)
    t_write = time.perf_counter() - t1
    marker = {
        "generator_version": GENERATOR_VERSION,
        "generator_sha256": _generator_sha(),
        "target_mb": size_mb,
        "bytes": nbytes,
        "copies": copies,
        "template_seconds": round(t_tpl, 3),
        "write_seconds": round(t_write, 3),
        "generator_peak_rss_mb": round(_maxrss_bytes() / MB, 1),
        **tpl.describe(),
    }
    _marker_path(path).write_text(json.dumps(marker, indent=1) + "\n")
    log(
        f"[make_traces] {path.name}: wrote {nbytes / MB:.1f} MB, {copies} copies, "
        f"template {t_tpl:.2f}s + write {t_write:.2f}s ({nbytes / MB / max(t_write, 1e-9):.0f} MB/s), "
        f"peak RSS {marker['generator_peak_rss_mb']:.0f} MB"
    )
    return path, marker


def _maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


# --------------------------------------------------------------------------- verify


def verify(path: Path, source: Path = DEFAULT_SOURCE) -> list[str]:
    """Check a generated trace against the source; returns a list of problems (empty = ok).

    Loads the whole file, so meant for the small sizes.
    """
    problems: list[str] = []
    raw_src = source.read_bytes()
    if source.suffix == ".gz":
        raw_src = gzip.decompress(raw_src)
    src = orjson.loads(raw_src)
    src_evs = src["traceEvents"]
    text = path.read_bytes()
    out = orjson.loads(text)
    evs = out["traceEvents"]
    marker = _marker_path(path)
    copies = json.loads(marker.read_text())["copies"] if marker.exists() else 1

    if list(out) != list(src):
        problems.append(f"top-level keys differ: {list(out)} vs {list(src)}")
    problems += [f"top-level {k!r} differs" for k in src if k != "traceEvents" and out.get(k) != src[k]]
    # every ts token has exactly 3 decimals (as in the source)
    bad = [
        m.group(1)
        for m in re.finditer(rb'"ts": (-?[0-9.eE+]+)', text)
        if not re.fullmatch(rb"-?\d+\.\d{3}", m.group(1))
    ]
    if bad:
        problems.append(f"{len(bad)} ts tokens without 3 decimals, e.g. {bad[:3]}")
    n_meta_src = sum(1 for e in src_evs if e.get("ph") == "M")
    n_meta = sum(1 for e in evs if e.get("ph") == "M")
    if n_meta != n_meta_src:
        problems.append(f"metadata events {n_meta} != {n_meta_src}")
    # ids unique where the source has them unique
    for key, cat in (("correlation", "cuda_runtime"), ("Ev Idx", None), ("Record function id", None)):
        cnt = Counter(e["args"][key] for e in evs if key in e.get("args", {}) and (cat is None or e.get("cat") == cat))
        dup = [v for v, c in cnt.items() if c > 1]
        if dup:
            problems.append(f"{len(dup)} duplicated {key} values, e.g. {dup[:3]}")
    steps = [e["name"] for e in evs if e.get("ph") == "X" and STEP_RE.match(str(e.get("name")))]
    if len(steps) != len(set(steps)):
        problems.append("duplicated ProfilerStep names")
    # GPU events whose correlation has no runtime event: no more than in the source
    for cat in ("kernel", "gpu_memcpy", "gpu_memset"):
        orphan_src = _orphans(src_evs, cat)
        orphan = _orphans(evs, cat)
        if orphan > orphan_src * copies:
            problems.append(f"{cat}: {orphan} without runtime event (source {orphan_src})")
    # flows: at most one start per (cat, id)
    starts = Counter((e.get("cat"), e.get("id")) for e in evs if e.get("ph") == "s")
    bad_flows = [k for k, c in starts.items() if c > 1]
    if bad_flows:
        problems.append(f"{len(bad_flows)} flow ids with several starts, e.g. {bad_flows[:3]}")
    # GPU stream lanes: no more overlapping events than the source has per copy
    src_overlaps = _overlaps(src_evs)
    overlaps = _overlaps(evs)
    if overlaps > src_overlaps * copies:
        problems.append(f"{overlaps} overlapping GPU events on a stream (source {src_overlaps})")
    return problems


def _orphans(evs: list[dict], cat: str) -> int:
    rt = {
        e["args"]["correlation"] for e in evs if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    return sum(1 for e in evs if e.get("cat") == cat and e.get("args", {}).get("correlation") not in rt)


def _overlaps(evs: list[dict]) -> int:
    lanes = defaultdict(list)
    for e in evs:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            a = _ns_of(e["ts"])
            lanes[(e["pid"], e["tid"])].append((a, a + _ns_of(e["dur"])))
    n = 0
    for iv in lanes.values():
        iv.sort()
        n += sum(1 for (_, b0), (a1, _) in pairwise(iv) if a1 < b0)
    return n


# --------------------------------------------------------------------------- CLI


def parse_sizes(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="sizes in MB (10**6 bytes), comma separated"
    )
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--force", action="store_true", help="regenerate even when cached")
    ap.add_argument("--verify", action="store_true", help="load each trace (<= 200 MB) and check it against the source")
    args = ap.parse_args(argv)
    rc = 0
    for size in parse_sizes(args.sizes):
        path, marker = ensure_trace(size, args.cache_dir, args.source, force=args.force)
        if args.verify:
            if marker["bytes"] > 200 * MB:
                print(f"[make_traces] {path.name}: verify skipped (> 200 MB)")
                continue
            t0 = time.perf_counter()
            problems = verify(path, args.source)
            dt = time.perf_counter() - t0
            if problems:
                rc = 1
                for p in problems:
                    print(f"[make_traces] {path.name}: PROBLEM {p}")
            else:
                print(f"[make_traces] {path.name}: verify ok ({dt:.1f}s)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
