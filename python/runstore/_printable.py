"""A string from a store as the terminal commands show it: never a terminal command.

Run ids, series and parameter names, hosts and error messages are written by any writer, and
``runstore status``, ``watch``, the progress lines and the commands' messages print them. In
that text output (to a terminal or not) the characters a terminal acts on, or that reorder or
break the text around them, are shown escaped, as Python's ``repr`` writes them:

- the C0 controls U+0000-U+001F, DEL U+007F and the C1 controls U+0080-U+009F: ``\\t``,
  ``\\n``, ``\\r`` for tab, line feed and carriage return, ``\\xHH`` for the others (ESC is
  ``\\x1b``, the one-character CSI ``\\x9b``);
- the bidirectional marks, embeddings, overrides and isolates U+061C, U+200E, U+200F,
  U+202A-U+202E, U+2066-U+2069, and the line and paragraph separators U+2028, U+2029
  (``\\uHHHH``: ``\\u202e``);
- a lone surrogate, which only a string that did not come from UTF-8 can hold (``\\ud800``).

Everything else, backslashes included, is shown as it is. The compiled tool applies the same
rule (``runstore::text::Printable``, present/runstore/text.h). Machine formats are exact
instead: JSON, in which these characters are ``\\u`` escapes (Python's ``json`` writes every
character outside ASCII so), and CSV in a file. cli/README.md, "Strings from a store", states
the rule for both.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]"
)


_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    c = ord(ch)
    return _SHORT.get(ch) or (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}")


def printable(s: object) -> str:
    """``str(s)`` with the characters above escaped; the same string when it holds none."""
    return _UNSAFE.sub(_escape, str(s))
