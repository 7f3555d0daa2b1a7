"""Python snippets highlighted on the server: spans around keywords, strings, numbers, comments.

Pure, with the standard library's tokenizer; the text is escaped here, so the
result is safe HTML (``Markup``). A snippet the tokenizer cannot read (cut
short, not Python) is shown escaped and plain.
"""

from __future__ import annotations

import io
import keyword
import tokenize

from markupsafe import Markup, escape

__all__ = ["highlight"]

_CLASSES = {tokenize.STRING: "tok-str", tokenize.NUMBER: "tok-num", tokenize.COMMENT: "tok-com"}


def _offsets(code: str) -> list[int]:
    """The offset in ``code`` of each line's start (1-based lines, as tokenize counts)."""
    starts = [0, 0]
    for line in code.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def highlight(code: str) -> Markup:
    """``code`` as HTML with ``<span class="tok-...">`` around the tokens worth a colour."""
    starts = _offsets(code)
    spans: list[tuple[int, int, str]] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            kind = _CLASSES.get(tok.type)
            if tok.type == tokenize.NAME and (
                keyword.iskeyword(tok.string) or keyword.issoftkeyword(tok.string)
            ):
                kind = "tok-kw"
            if kind is not None:
                begin = starts[tok.start[0]] + tok.start[1]
                end = starts[tok.end[0]] + tok.end[1]
                spans.append((begin, end, kind))
    except (tokenize.TokenError, SyntaxError, IndexError):
        return Markup(escape(code))
    out: list[str] = []
    at = 0
    for begin, end, kind in spans:
        if begin < at:
            continue
        out.append(str(escape(code[at:begin])))
        out.append(f'<span class="{kind}">{escape(code[begin:end])}</span>')
        at = end
    out.append(str(escape(code[at:])))
    return Markup("".join(out))
