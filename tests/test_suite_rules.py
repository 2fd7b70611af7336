"""Rules of the test suite itself that scripts/test.sh relies on."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT


def test_every_numerics_test_is_in_a_module_the_reruns_collect(request: pytest.FixtureRequest) -> None:
    """scripts/test.sh reruns the numerics tests under other CPU kernels, collecting only the modules whose text
    says `mark.numerics` (grep): a test marked any other way would silently miss the reruns."""
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert 'grep -l -E "mark\\.numerics" tests/test_*.py' in script
    marked = {Path(str(item.path)) for item in request.session.items if item.get_closest_marker("numerics")}
    if not marked:
        pytest.skip("this session collected no numerics test (the whole suite does)")
    for path in marked:
        assert re.search(r"mark\.numerics", path.read_text()), path
        assert path.parent == ROOT / "tests" and path.name.startswith("test_"), path
