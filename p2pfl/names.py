"""Names that become one folder under a parent the user chose (--name, study names and points): one path
component, so nothing is ever written outside that parent."""
from __future__ import annotations

import os

#: The longest name allowed, in characters (file systems allow 255 bytes; a run folder may get a `-N` suffix).
MAX_NAME = 200


def folder_name_error(name: str) -> str | None:
    """What makes `name` unfit to be one folder name (None when it is fit): a separator, `.` or `..`, an empty
    name, a control character, or more than MAX_NAME characters."""
    if not name:
        return "must not be empty"
    if len(name) > MAX_NAME:
        return f"too long ({len(name)} characters); at most {MAX_NAME} allowed"
    if name in (".", ".."):
        return f"'{name}' is not a folder name; give one folder name (no '/', not '.' or '..')"
    if any(sep and sep in name for sep in ("/", os.sep, os.altsep)):
        return "a path, not one folder name; give one folder name (no '/', not '.' or '..')"
    if not all(c.isprintable() for c in name):
        return "must not hold control characters"
    return None
