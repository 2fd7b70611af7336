"""Every `python -m p2pfl.run` command the README and the docs show is checked against the options as they are
(no flag renamed away or abbreviated, no value out of its choices or range, no --help topic unknown), and the
README's first run is run as written and must learn."""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from p2pfl.cli import build_parser
from p2pfl.config import ConfigError, _check_bounds, _check_choice, _convert, options

from conftest import ROOT, timing_free_records

PAGES = [ROOT / "README.md", ROOT / "launch" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: A command that shows a placeholder (`...`, `<RUN>`, `$VAR`, `PATH`) is a pattern, not a command.
PLACEHOLDER = re.compile(r"\.\.\.|…|\[flags\]|<[A-Z_a-z]+>|\$[A-Z_{]|\bPATH\b|\bFILE\b|\bX\b")


def documented_commands() -> list[tuple[str, str]]:
    """(page:line, the command) for every `python -m p2pfl.run` a page shows: in a code block (continued lines
    joined) or inline between backticks."""
    found = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        i = 0
        while i < len(lines):
            at = lines[i].find("python -m p2pfl.run")
            where = f"{page.relative_to(ROOT)}:{i + 1}"
            if at >= 0:
                inline = lines[i][:at].count("`") % 2 == 1
                text = lines[i][at:]
                while text.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    text = text.rstrip()[:-1] + " " + lines[i].strip()
                if inline:
                    text = text.split("`", 1)[0]
                text = text.split(" #", 1)[0].split(" |", 1)[0].strip()
                if not PLACEHOLDER.search(text):
                    found.append((where, text))
            i += 1
    return found


COMMANDS = documented_commands()


def test_the_pages_show_commands() -> None:
    assert len(COMMANDS) >= 20 and any(c.startswith("python -m p2pfl.run --algorithm fedavg --dataset synthetic")
                                       for _, c in COMMANDS)


@pytest.mark.parametrize("where,command", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_documented_command_names_real_options_and_values(where: str, command: str) -> None:
    """Each flag exists (never abbreviated), each value converts and lies in its choices and range. Files the
    command names (a user's npz, a config) are the reader's, so validation that reads them is not run."""
    argv = shlex.split(command)[3:]
    parser = build_parser()

    def fail(message: str) -> None:
        raise AssertionError(f"{where}: {command}\n  {message}")

    parser.error = fail  # type: ignore[method-assign]
    try:
        parsed = vars(parser.parse_args(argv))
    except SystemExit as shown_help:  # --help TOPIC printed its page (an unknown topic is an error, not 0)
        assert shown_help.code in (0, None) and "--help" in argv, f"{where}: {command}"
        return
    given = {k: v for k, v in parsed.items() if k not in ("config", "print_config")}
    by_name = {f.name: f for f in options()}
    for name, value in given.items():
        try:
            converted = _convert(by_name[name], value)
            _check_choice(by_name[name], converted)
            _check_bounds(by_name[name], converted)
        except ConfigError as err:
            raise AssertionError(f"{where}: {command}\n  {err}") from None


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())["final"]


def test_the_readmes_first_run_learns_as_written_and_from_python(tmp_path: Path, monkeypatch) -> None:
    """The README's first command, run as written (in a fresh folder, `runs/` under it), learns: the network
    average at least 0.5 above chance (0.1; it measured 0.91), the peers' own models at least 0.4 above; and its
    Python form gives the same records."""
    readme = (ROOT / "README.md").read_text()
    command = next(c for w, c in COMMANDS if w.startswith("README.md") and "--dataset synthetic" in c)
    proc = subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (cli_run,) = (tmp_path / "runs").iterdir()
    final = _summary(cli_run)
    assert final["test_acc_avg"] >= 0.6 and final["test_acc_peer_mean"] >= 0.5, final
    snippet = re.search(r"    import p2pfl\n(    run = p2pfl\.simulate\(.*?\)\n)", readme, re.S)
    assert snippet is not None
    (tmp_path / "py").mkdir()
    monkeypatch.chdir(tmp_path / "py")
    namespace: dict = {}
    exec("import p2pfl\n" + "\n".join(line[4:] for line in snippet.group(1).splitlines()), namespace)
    assert timing_free_records(Path(namespace["run"].path)) == timing_free_records(cli_run)
