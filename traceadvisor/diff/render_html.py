"""``diff`` as one self-contained HTML page: the same content as the text and Markdown comparison
(``render._lines`` decides what is said), laid out as tables, with the step breakdown drawn as
paired SVG bars (before above, after below, one row per category) so the category that moved is
seen first.

Offline by construction: no script, no stylesheet link, no font or image from the network; the
styles are inlined. Every string from a trace (kernel, op and file names) goes through
``html.escape``: trace names are untrusted (a hostile trace can hold ``<script>``).
"""

from __future__ import annotations

import html
import math

from traceadvisor.diff.model import Diff
from traceadvisor.diff.render import ROWS, _pct, _signed, _t, significance
from traceadvisor.diff.tables import Table

# Status colours: the reader scans for red (worse/new/slower) and green (better/resolved/faster).
_GOOD = "#1a7f37"
_BAD = "#cf222e"
_BUCKET_COLOUR = {
    "faster": _GOOD,
    "removed": _GOOD,
    "resolved": _GOOD,
    "better": _GOOD,
    "slower": _BAD,
    "added": _BAD,
    "new": _BAD,
    "worse": _BAD,
}

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1f2328;background:#fff}
main{max-width:1100px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:20px;margin:8px 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{padding:3px 8px;border-bottom:1px solid #eaeef2;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;word-break:break-all}
.tag{display:inline-block;padding:0 6px;border-radius:8px;color:#fff;font-size:12px}
.muted{color:#59636e}.big{font-size:18px;font-weight:600}
svg text{font:12px system-ui,sans-serif;fill:#1f2328}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _tag(status: str) -> str:
    colour = _BUCKET_COLOUR.get(status, "#6e7781")
    return f'<span class="tag" style="background:{colour}">{_e(status)}</span>'


def _delta_cell(ns: float, suffix: str = "") -> str:
    """A signed time coloured by direction (faster green, slower red), ``suffix`` after it."""
    if math.isnan(ns):
        return '<td class="n">n/a</td>'
    colour = _GOOD if ns < 0 else _BAD if ns > 0 else "inherit"
    return f'<td class="n" style="color:{colour}">{_e(_signed(ns) + suffix)}</td>'


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _steps(d: Diff) -> list[str]:
    out = ['<section id="step-time"><h2>Step time</h2><table>']
    out.append(
        '<tr><th>measure</th><th class="n">before</th><th class="n">after</th><th class="n">change</th>'
        '<th class="n">median</th><th class="n">p90</th><th>test</th></tr>'
    )
    for c in (d.unprofiled, d.profiled):
        out.append(
            f"<tr><td>{_e(c.measure)}</td><td class='n'>{_e(_t(c.before.report_ns))}</td>"
            f"<td class='n'>{_e(_t(c.after.report_ns))}</td>{_delta_cell(c.delta_ns, f' ({_pct(c.delta_pct)})')}"
            f"<td class='n'>{_e(_t(c.before.median_ns))} → {_e(_t(c.after.median_ns))}</td>"
            f"<td class='n'>{_e(_t(c.before.p90_ns))} → {_e(_t(c.after.p90_ns))}</td>"
            f"<td class='muted'>{_e(significance(c))}</td></tr>"
        )
    out.append("</table></section>")
    return out


def _breakdown_svg(d: Diff) -> str:
    """Paired horizontal bars per category on one scale (the longer of the two steps)."""
    b = d.breakdown
    if b is None:
        return ""
    rows = [(c.name, c.before_ns, c.after_ns) for c in b.categories]
    rows.append(("unexplained", b.unexplained_before_ns, b.unexplained_after_ns))
    scale = max([abs(x) for _, bb, aa in rows for x in (bb, aa)] + [1])
    label_w, bar_w, row_h = 230, 560, 34
    height = row_h * len(rows) + 24
    parts = [
        f'<svg id="breakdown-chart" role="img" width="{label_w + bar_w + 200}" height="{height}" '
        f'viewBox="0 0 {label_w + bar_w + 200} {height}">'
        f'<text x="{label_w}" y="12" class="muted">before</text>'
        f'<rect x="{label_w + 50}" y="3" width="10" height="10" fill="#8c959f"/>'
        f'<text x="{label_w + 70}" y="12">after</text>'
        f'<rect x="{label_w + 110}" y="3" width="10" height="10" fill="#0969da"/>'
    ]
    for i, (name, before, after) in enumerate(rows):
        y = 22 + i * row_h
        wb = max(abs(before) / scale * bar_w, 0.5)
        wa = max(abs(after) / scale * bar_w, 0.5)
        parts.append(f'<text x="0" y="{y + 18}">{_e(name)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 2}" width="{wb:.1f}" height="12" fill="#8c959f"/>')
        parts.append(f'<rect x="{label_w}" y="{y + 16}" width="{wa:.1f}" height="12" fill="#0969da"/>')
        parts.append(f'<text x="{label_w + max(wb, wa) + 6:.1f}" y="{y + 20}">{_e(_signed(after - before))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _breakdown(d: Diff) -> list[str]:
    out = ['<section id="breakdown"><h2>Where the step time went (per profiled step)</h2>']
    b = d.breakdown
    if b is None:
        out.append(
            "<p class='muted'>No breakdown: a side has no steps, or one side is one trace and the other several "
            "ranks.</p></section>"
        )
        return out
    out.append(
        f"<p>{_e(b.basis)}: step {_e(_t(b.step_before_ns))} → {_e(_t(b.step_after_ns))} "
        f"({_e(_signed(b.step_delta_ns))}); the deltas below sum to the step's.</p>"
    )
    out.append(_breakdown_svg(d))
    out.append(
        '<table><tr><th>category</th><th class="n">before</th><th class="n">after</th><th class="n">change</th></tr>'
    )
    for c in b.categories:
        out.append(
            f"<tr><td>{_e(c.name)}</td><td class='n'>{_e(_t(c.before_ns))}</td>"
            f"<td class='n'>{_e(_t(c.after_ns))}</td>{_delta_cell(c.delta_ns)}</tr>"
        )
    out.append(
        f"<tr class='muted'><td>unexplained (the step less the categories)</td>"
        f"<td class='n'>{_e(_t(b.unexplained_before_ns))}</td><td class='n'>{_e(_t(b.unexplained_after_ns))}</td>"
        f"{_delta_cell(b.unexplained_delta_ns)}</tr></table></section>"
    )
    return out


def _names(t: Table) -> list[str]:
    out = [f'<section id="{_e(t.kind)}"><h2>{_e(t.kind.capitalize())} (per step, joined on normalised names)</h2>']
    counts = ", ".join(
        f"{_tag(k.name)} {k.count} ({_e(_t(k.before_ns))} → {_e(_t(k.after_ns))})" for k in t.buckets if k.count
    )
    out.append(f"<p>{counts or _e(f'no {t.kind} on either side')}</p>")
    changed = [r for r in t.rows if r.bucket != "unchanged"]
    if changed:
        out.append(
            '<table><tr><th></th><th>name</th><th class="n">calls/step</th><th class="n">before</th>'
            '<th class="n">after</th><th class="n">change</th></tr>'
        )
        for r in changed[: ROWS * 3]:
            calls = f"{r.before_calls:g} → {r.after_calls:g}"
            out.append(
                f"<tr><td>{_tag(r.bucket)}</td><td><code>{_e(r.name)}</code></td><td class='n'>{_e(calls)}</td>"
                f"<td class='n'>{_e(_t(r.before_ns))}</td><td class='n'>{_e(_t(r.after_ns))}</td>"
                f"{_delta_cell(r.delta_ns)}</tr>"
            )
        out.append("</table>")
        if len(changed) > ROWS * 3:
            out.append(f"<p class='muted'>… {len(changed) - ROWS * 3} more changed (see --format json)</p>")
    out.append("</section>")
    return out


def _findings(d: Diff) -> list[str]:
    out = ['<section id="findings"><h2>Findings</h2>']
    if not d.findings:
        out.append("<p>No findings on either side.</p></section>")
        return out
    out.append('<table><tr><th></th><th>rule</th><th>where</th><th class="n">cost per step</th><th>message</th></tr>')
    for f in d.findings:
        out.append(
            f"<tr class='finding-change' data-status='{_e(f.status)}' data-code='{_e(f.code)}'>"
            f"<td>{_tag(f.status)}</td><td>{_e(f.code)} {_e(f.rule)}</td><td><code>{_e(f.where)}</code></td>"
            f"<td class='n'>{_e(_t(f.cost_before_ns))} → {_e(_t(f.cost_after_ns))}</td>"
            f"<td>{_e(f.message)}</td></tr>"
        )
    out.append("</table></section>")
    return out


def _ranks(d: Diff) -> list[str]:
    if not d.ranks:
        return []
    out = ['<section id="ranks"><h2>Ranks (mean step)</h2><table>']
    out.append('<tr><th>rank</th><th class="n">before</th><th class="n">after</th></tr>')
    for rk in d.ranks:
        out.append(
            f"<tr><td>{rk.rank}</td><td class='n'>{_e(_t(rk.before_ns))}</td>"
            f"<td class='n'>{_e(_t(rk.after_ns))}</td></tr>"
        )
    out.append("</table></section>")
    return out


def render_html(d: Diff) -> str:
    g = d.gate
    headline = (
        f"{_e(g.measure)} step {_e(_t(g.before.report_ns))} → {_e(_t(g.after.report_ns))} "
        f"({_e(_signed(g.delta_ns))}, {_e(_pct(g.delta_pct))})"
    )
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>traceadvisor diff: {_e(d.before)} → {_e(d.after)}</title>",
        f"<style>{_STYLE}</style></head><body><main>",
        f"<h1>diff: <code>{_e(d.before)}</code> → <code>{_e(d.after)}</code></h1>",
        f'<p id="headline" class="big">{headline}</p>',
        f"<p class='muted'>Before: {_plural(d.before_traces, 'trace')}, {_plural(d.before_steps, 'step')}; after: "
        f"{_plural(d.after_traces, 'trace')}, {_plural(d.after_steps, 'step')}. Negative changes: AFTER is "
        "faster.</p>",
        *_steps(d),
        *_breakdown(d),
        *_names(d.kernels),
        *_names(d.ops),
        *_findings(d),
        *_ranks(d),
        "</main></body></html>",
    ]
    return "\n".join(body) + "\n"
