"""Values quoted in error messages, cut to a short prefix: a message stays one short line whatever the input."""
from __future__ import annotations

import reprlib

#: The most characters of a value an error message quotes.
LIMIT = 80

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 2, 6, 6, 4, 6
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = LIMIT + 4


def shown(value: object, limit: int = LIMIT) -> str:
    """`value` as repr() writes it, cut after `limit` characters with '...'; the work is bounded too (nested and
    huge values are never written out in full)."""
    if isinstance(value, str):
        text = repr(value[:limit + 1])
    else:
        try:
            text = _REPR.repr(value)
        except ValueError:  # an int too long for str()
            text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."
