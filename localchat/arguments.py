"""argparse for every localchat command: a mistyped option is answered with the command's own usage and
the option it most likely meant (`chat --temprature` -> did you mean --temperature?).

argparse itself suggests only choices and subcommand names (Python 3.14's `suggest_on_error`), never
options, and reports an unknown option of a subcommand with the top-level usage: `parse_args` here
finds the subcommand that was given and lets it say what was wrong.
"""

from __future__ import annotations

import argparse
import difflib
from typing import Sequence


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose unknown options name their closest match; its subcommands are Parsers too."""

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        found, extras = self.parse_known_args(args, namespace)
        if extras:
            chosen = _innermost(self, found)
            chosen.error(unrecognized(chosen, extras))  # exits with the chosen command's usage
        return found


def _innermost(parser: argparse.ArgumentParser, found: argparse.Namespace) -> argparse.ArgumentParser:
    """The subcommand's parser the arguments chose (the parser itself when it has no subcommands)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(found, action.dest, None) or "")
            if chosen is not None:
                return _innermost(chosen, found)
    return parser


def unrecognized(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """What to say of the arguments `parser` did not know: an option with its likely meaning first."""
    options = [arg for arg in extras if arg.startswith("-") and arg != "-"]
    if not options:
        return (f"unrecognized arguments: {' '.join(extras)} (a prompt or value with spaces is one argument: "
                "put it in quotes)")
    typed = options[0].split("=", 1)[0]
    known = [flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")]
    meant = closest(typed, known)
    hint = f"; did you mean {meant}?" if meant else f"; `{parser.prog} --help` lists the options"
    return f"unrecognized option {typed}{hint}"


def closest(word: str, choices: Sequence[str]) -> str | None:
    """The one of `choices` a mistyped `word` most likely meant, or None when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None
