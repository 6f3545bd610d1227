"""Text people gave, made safe to print: a key or name from a file, a path, a command argument.

A terminal obeys what it is sent: an escape sequence in a YAML key (`"\\e[2J"`) once cleared the
screen and printed a green "OK" although `twin check` failed. Invisible characters (a zero-width
space in a key) and look-alikes (a Cyrillic `а` in `fabric`) make a message name a key that looks
right. So every piece of user text is shown with control, format and other invisible characters
escaped (`\\x1b`, `\\u200b`), and keys and names, which the formats define as ASCII, with every
non-ASCII character escaped and named.
"""

from __future__ import annotations

import unicodedata

# Unicode categories that print nothing visible or move the cursor: controls, format characters
# (zero-width, bidi overrides), line/paragraph separators, private use, surrogates, unassigned.
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn"})


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _hidden(char: str) -> bool:
    category = unicodedata.category(char)
    return category in _INVISIBLE or (category == "Zs" and char != " ")


def shown(text: object, keep_newlines: bool = False) -> str:
    """`text` with every control or invisible character escaped (newlines kept if asked)."""
    text = str(text)
    if text.isascii() and text.isprintable():
        return text
    return "".join(c if (keep_newlines and c == "\n") or not _hidden(c) else _escaped(c) for c in text)


def shown_name(text: object) -> str:
    """A key or name, which the formats define as ASCII: every other character escaped."""
    text = str(text)
    return text if text.isascii() and text.isprintable() else "".join(
        c if c.isascii() and c.isprintable() else _escaped(c) for c in text)


def foreign_characters(text: object) -> str:
    """What a key's non-ASCII characters are ("\\u0430 is CYRILLIC SMALL LETTER A"), or ""."""
    seen = dict.fromkeys(c for c in str(text) if not (c.isascii() and c.isprintable()))
    named = [f"{_escaped(c)} is {unicodedata.name(c, 'a control or unnamed character')}" for c in seen]
    return "; ".join(named[:4]) + (f"; and {len(named) - 4} more" if len(named) > 4 else "")


def key_note(key: object) -> str:
    """For an unknown key: what makes it differ from one that looks the same, or ""."""
    named = foreign_characters(key)
    return f"the key has characters that are not plain ASCII ({named}); " if named else ""


def clipped(text: str, limit: int) -> str:
    """At most `limit` characters, saying how many were left out."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more characters)"
