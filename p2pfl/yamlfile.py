"""YAML the project reads (options, studies, peers specs, run folders): safe types only, no aliases, bounded size.

An alias (`*a`) lets a few hundred bytes stand for gigabytes of nested lists once a value is written out, so
aliases are refused outright; with them gone a document's memory is proportional to its text, which is bounded
too. Every refusal is a yaml.YAMLError, so callers keep one `except yaml.YAMLError` for all bad YAML.
"""
from __future__ import annotations

from typing import IO, Any

import yaml

#: The longest YAML document read, in characters.
MAX_CHARS = 8 << 20


class _NoAliases(yaml.SafeLoader):
    """The safe loader refusing aliases where they are composed, before anything is built from them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted",
                                              self.peek_event().start_mark)
        return super().compose_node(parent, index)


def safe_load(stream: str | IO[str]) -> Any:
    """yaml.safe_load without aliases, of at most MAX_CHARS characters and bounded nesting (a yaml.YAMLError
    otherwise)."""
    text = stream if isinstance(stream, str) else _read(stream)
    if len(text) > MAX_CHARS:
        raise yaml.YAMLError(f"longer than {MAX_CHARS} characters")
    try:
        return yaml.load(text, Loader=_NoAliases)  # noqa: S506 - a SafeLoader
    except RecursionError:
        raise yaml.YAMLError("nested too deeply") from None
    except ValueError as exc:  # a value the safe constructors cannot build (an int of 5,000 digits)
        raise yaml.YAMLError(f"a value cannot be read ({str(exc).splitlines()[0][:80]})") from None


def _read(stream: IO[str]) -> str:
    """The stream's text, read in small pieces and no further than one character past MAX_CHARS."""
    pieces: list[str] = []
    size = 0
    while size <= MAX_CHARS and (piece := stream.read(1 << 16)):
        pieces.append(piece)
        size += len(piece)
    return "".join(pieces)
