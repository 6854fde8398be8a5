"""Text from a trace made safe to show: on a terminal, in a log line, in Markdown.

A trace is untrusted input: any kernel, op, annotation, frame or device name (and the file name)
can hold ESC/CSI/OSC sequences (which set the window title, clear the screen or plant OSC 8 links
whose text differs from their target), newlines (which print forged report lines), bidi overrides
(U+202E shows ``gnp.exe`` for ``exe.png``), or HTML and Markdown that a pull-request comment would
render. The text and Markdown renderers, the command line's stderr lines and the advisor's log
records pass every such string through here; the JSON report keeps the exact strings (JSON
escapes control characters itself, and its readers want the real names).

Every character that Python does not call printable (``str.isprintable``: categories Cc, Cf, Cs,
Co, Cn, Zl, Zp and every space but U+0020) is written as a visible escape: ``\\x1b``, ``\\n``,
``\\u202e``. That covers C0 and C1 controls, DEL, the bidi embeddings, overrides, isolates and
marks (U+202A-202E, U+2066-2069, U+200E/F, U+061C), zero-width characters, the line and paragraph
separators (which ``str.splitlines`` and JavaScript treat as newlines) and lone surrogates (which
cannot be encoded as UTF-8 at all). Backslashes are left alone, so ``C:\\path`` reads as written.
"""

from __future__ import annotations

import re

# Characters of a name shown in a text or Markdown report (the JSON report keeps every one). C++
# kernel names run to ~600 characters; the readable part is the head (the kernel template) and
# the tail (the last arguments), so the middle goes.
NAME_LIMIT = 160
# Characters of a message, recommendation or warning: long enough for any message a rule writes,
# short enough that a message quoting a 200 MB event name stays a few lines.
TEXT_LIMIT = 2000
ELLIPSIS = "…"

_NAMED_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _visible(c: str) -> str:
    code = ord(c)
    if c in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[c]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape_controls(text: str) -> str:
    """``text`` with every non-printable character as a visible escape (``\\x1b``, ``\\u202e``)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _visible(c) for c in text)


def shorten(text: str, limit: int) -> str:
    """``text`` cut in the middle to ``limit`` characters (an ellipsis marks the cut)."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - 1 - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail > 0 else "")


def terminal(value: object, limit: int = NAME_LIMIT) -> str:
    """``value`` as one safe line for a terminal or a log: shortened to ``limit`` characters of
    the original (before escaping, so a cut never splits an escape), controls escaped."""
    return escape_controls(shorten(str(value), limit))


def one_line(value: object) -> str:
    """A message for a stderr or log line (``traceadvisor: error: ...``): never more than one line."""
    return terminal(value, TEXT_LIMIT)


# CommonMark lets a backslash escape any ASCII punctuation. Inline, only these open something:
# code spans (`), emphasis (* _), links, images and footnotes ([ ]: without them ``!``, ``(`` and
# ``)`` are plain text), strikethrough (~, GFM), table cells (|, GFM), escapes themselves (\);
# HTML's three are written as entities, so no tag, comment, autolink or entity can open. Everything
# else matters only at the start of a line (headings, lists, block quotes, setext underlines), and
# the only line start in an escaped string is its first character (newlines are escaped), so
# ``12.3%`` and ``(9%)`` stay readable in the Markdown source.
_MARKDOWN_INLINE = re.compile(r"([\\`*_\[\]|~])")
_MARKDOWN_LINE_START = re.compile(r"^(\s*)(?:([#+=-])|(\d{1,9})([.)]))")
_HTML = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def markdown(value: object, limit: int = NAME_LIMIT) -> str:
    """``value`` as inline Markdown text that renders as exactly these characters: controls
    escaped (no raw newline or carriage return, so a table row stays one row), HTML as entities,
    inline Markdown punctuation behind a backslash (``|`` too, so it never splits a table cell),
    and a leading ``#``, ``-``, ``+``, ``=`` or ``1.`` that would start a heading or a list."""
    text = _MARKDOWN_INLINE.sub(r"\\\1", terminal(value, limit)).translate(_HTML)
    return _MARKDOWN_LINE_START.sub(_escape_line_start, text, count=1)


def _escape_line_start(m: re.Match[str]) -> str:
    if m.group(2):
        return f"{m.group(1)}\\{m.group(2)}"
    return f"{m.group(1)}{m.group(3)}\\{m.group(4)}"


def markdown_code(value: object, limit: int = NAME_LIMIT, in_table: bool = True) -> str:
    """``value`` as a Markdown code span (read verbatim: no HTML, no links, no emphasis).

    The fence is one backtick longer than the longest run of backticks inside, and a space pads
    both ends when the text starts or ends with a backtick or a space (CommonMark strips one space
    from each end of a code span that has both). In a table cell ``|`` still splits the row, even
    inside a code span (GFM), so it is written ``\\|``, which GFM reads as ``|`` there.
    """
    text = terminal(value, limit)
    if in_table:
        text = text.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    if text and text.strip(" ") and (text[0] in "` " or text[-1] in "` "):
        text = f" {text} "
    return f"{fence}{text}{fence}"
