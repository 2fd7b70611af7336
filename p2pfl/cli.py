"""The command line of `python -m p2pfl.run`: argparse generated from the options (p2pfl.config), `--help [TOPIC]`
rendered by p2pfl.cli_help, and the plug-ins a command line names imported before the parser is built."""
from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from p2pfl import plugins as _plugins
from p2pfl.cli_help import render
from p2pfl.config import (
    ConfigError,
    RunConfig,
    _field_type,
    _flag,
    _load_plugins,
    _run_plugins,
    from_options,
    load_yaml,
    options,
)
from p2pfl.runtime import console
from p2pfl.suggest import option_hint


class _Parser(argparse.ArgumentParser):
    """argparse with `--help [TOPIC]` rendered by p2pfl.cli_help once every flag is read, so that `--algorithm X
    --help` shows X's defaults wherever --help stands."""

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if hasattr(parsed, "help"):
            given = dict(vars(parsed))
            print(render(given.pop("help"), given), end="")
            self.exit()
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m p2pfl.run`, generated from the options (their help: p2pfl.cli_help); every
    value is read as a string here and converted by `_convert`, so a bad one is the project's one-line error."""
    parser = _Parser(prog="python -m p2pfl.run", add_help=False, argument_default=argparse.SUPPRESS,
                     allow_abbrev=False)  # --round is no --rounds (a YAML key is never abbreviated either)
    parser.add_argument("-h", "--help", nargs="?", const=None, metavar="TOPIC")
    parser.add_argument("--config")
    parser.add_argument("--print-config", action="store_true")
    parser.add_argument("--quiet", action="store_true")  # the console's, not the run's: p2pfl.runtime.console
    parser.add_argument("--verbose", action="store_true")
    for f in options():
        typ = _field_type(f)
        if typ is bool:
            parser.add_argument(_flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction)
        elif typ is tuple:  # repeatable: each flag adds a value
            parser.add_argument(_flag(f.name), dest=f.name, action="append", metavar="PATH.py|MODULE")
        else:
            parser.add_argument(_flag(f.name), dest=f.name, type=str, metavar=f.name.upper())
    return parser


def _preload_plugins(argv: Sequence[str]) -> None:
    """Import the plug-ins a command line names (--plugin, its --config's `plugins:`, else its --resume run's)
    before the parser is built: their options are flags, their names choices."""
    flagged, options_file, resume = _plugins.scan_argv(argv)
    listed = _load_plugins(flagged)
    if options_file is not None:
        listed += load_yaml(options_file).get("plugins", ())
    if not listed and resume is not None:
        _load_plugins(_run_plugins(resume))


def parse_args(argv: Sequence[str] | None = None) -> tuple[RunConfig, bool]:
    """Parse flags (over an optional YAML file) into a validated RunConfig; returns (config, print_only)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    _preload_plugins(argv)
    parser = build_parser()

    def fail(message: str) -> None:
        """argparse's messages, reworded to start with the option they are about."""
        named = re.match(r"argument (--[\w-]+)(?:/[\w-]+)?: (.*)", message)
        if named:
            raise ConfigError(f"{named.group(1)}: {named.group(2)}")
        unknown = re.match(r"unrecognized arguments: (\S+)", message)
        if unknown and unknown.group(1).startswith("--"):
            flag = unknown.group(1).split("=")[0]
            flags = [s for action in parser._actions for s in action.option_strings if s.startswith("--")]
            raise ConfigError(f"{flag}: unknown option{option_hint(flag, flags)} (see python -m p2pfl.run --help)")
        raise ConfigError(message)

    parser.error = fail  # type: ignore[method-assign]
    given = vars(parser.parse_args(argv))
    console.set_level(console.verbosity(given.pop("quiet", None), given.pop("verbose", None)))
    return from_options(given)
