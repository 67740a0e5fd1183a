"""Go's renderings that Kubernetes messages embed: `%q` (strconv.Quote) and `%v` of a []string."""

from __future__ import annotations

from collections.abc import Iterable

_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """Go's `%q` / strconv.Quote: double quotes, backslash escapes, non-printables as \\x, \\u, \\U."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def go_list(items: Iterable[str]) -> str:
    """Go's `%v` of a []string: `[a b]`."""
    return "[" + " ".join(items) + "]"
