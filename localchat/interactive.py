"""`localchat chat` without a prompt: a conversation in the terminal, with slash commands that are never
sent to the model. From a pipe (`echo "What is 2+2?" | localchat chat`) each line is a turn and stdout
carries the answers only: no prompts, no banner; what the commands say goes to stderr."""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from .arguments import closest
from .assemble import open_engine
from .config import Settings
from .errors import LocalchatError
from .progress_line import ProgressLine, follow
from .runtime.engine import Engine, Request
from .runtime.events import Done, Failed, Stats, TextDelta
from .runtime.sampling import SamplingParams

# What /help lists, in its order: (the command as typed, what it does).
COMMANDS = (
    ("/help", "list these commands"),
    ("/reset", "forget the conversation (the system prompt stays)"),
    ("/model NAME", "answer with another model, a catalog name or a .gguf path; the conversation stays"),
    ("/system TEXT", "set the system prompt; /system alone removes it"),
    ("/save FILE", "write the conversation to FILE: JSON when the name ends in .json, else Markdown"),
    ("/exit", "quit (also /quit, or Ctrl-D)"),
)
NAMES = tuple(usage.split()[0] for usage, _ in COMMANDS) + ("/quit",)
# A command is a slash and a word alone at the start of the line: "/usr/bin is what?" is a message.
COMMAND = re.compile(r"/[A-Za-z]+(?=\s|$)")


def help_text() -> str:
    width = max(len(usage) for usage, _ in COMMANDS)
    listed = [*COMMANDS, ("//TEXT", "send a message that begins with /: //etc/hosts sends /etc/hosts")]
    return "\n".join(f"  {usage:<{width}}  {about}" for usage, about in listed)


@dataclass(slots=True)
class Conversation:
    """The system prompt and the turns so far; each answer remembers the model that gave it."""

    system: str | None = None
    turns: list[dict[str, str]] = field(default_factory=list)

    def _head(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}] if self.system else []

    def messages(self) -> list[dict[str, str]]:
        """What the model reads: the system prompt, then the turns (without their model names)."""
        return self._head() + [{"role": t["role"], "content": t["content"]} for t in self.turns]

    def json(self, model: str, sampling: SamplingParams) -> str:
        """The conversation as /save writes a .json file: the model, the sampling, the messages."""
        settings = {name: getattr(sampling, name) for name in ("temperature", "top_p", "top_k", "min_p",
                                                                "repeat_penalty", "max_tokens", "seed")}
        return json.dumps({"model": model, "settings": settings, "messages": self._head() + self.turns},
                          ensure_ascii=False, indent=2) + "\n"

    def markdown(self) -> str:
        """The conversation as /save writes any other file."""
        parts = ["# localchat conversation"]
        if self.system:
            parts.append(f"**System prompt:** {self.system}")
        for turn in self.turns:
            who = "You" if turn["role"] == "user" else Path(turn.get("model", "localchat")).name  # a path: its file
            parts.append(f"## {who}\n\n{turn['content']}")
        return "\n\n".join(parts) + "\n"


class Session:
    """One terminal chat: the loaded model, the conversation, and the commands that change them."""

    def __init__(self, settings_for: Callable[[str | None], Settings], sampling: SamplingParams,
                 system: str | None, progress: bool) -> None:
        self.settings_for, self.sampling, self.progress = settings_for, sampling, progress
        self.conversation = Conversation(system or None)
        self.interactive = sys.stdin.isatty()
        self.engine, self.model = self._load(None)

    def run(self) -> int:
        """Read and answer until the end of input or /exit; the model is closed at the end."""
        try:
            if self.interactive:
                _say(f"localchat: {self.engine.worker.describe()} - type a message; /help lists the commands, "
                     "/exit or Ctrl-D quits, Ctrl-C stops an answer.")
            for line in _lines(self.interactive):
                if not line:
                    continue
                if COMMAND.match(line):
                    if not self.command(line):
                        return 0
                    continue
                self.answer(line[1:] if line.startswith("//") else line)
            return 0
        finally:
            self.engine.close()

    def _load(self, model: str | None) -> tuple[Engine, str]:
        settings = self.settings_for(model)
        with ProgressLine(enabled=self.progress) as line:
            return open_engine(settings, status=line.set), settings.model

    # -- commands ---------------------------------------------------------------------------

    def command(self, line: str) -> bool:
        """Run a slash command; False when it ends the chat."""
        name, rest = (line.split(maxsplit=1) + [""])[:2]
        if name in ("/exit", "/quit"):
            return False
        if name == "/help":
            _say(help_text())
        elif name == "/reset":
            self.conversation.turns.clear()
            _say("localchat: the conversation is cleared" + (" (the system prompt stays)."
                                                             if self.conversation.system else "."))
        elif name == "/system":
            self.conversation.system = rest or None
            _say(f"localchat: system prompt set: {rest}" if rest else "localchat: no system prompt now.")
        elif name == "/model":
            self.switch(rest)
        elif name == "/save":
            self.save(rest)
        else:
            meant = closest(name, NAMES)
            _say(f"localchat: unknown command {name}" + (f" (did you mean {meant}?)" if meant else "")
                 + "; the commands are:\n" + help_text())
        return True

    def switch(self, name: str) -> None:
        if not name:
            _say(f"localchat: answering with {self.model}; /model NAME switches (`localchat models` lists them).")
            return
        started = time.monotonic()
        try:
            engine, model = self._load(name)
        except LocalchatError as exc:  # the current model stays
            _say(f"localchat: {exc} (still answering with {self.model})")
            return
        old, self.engine, self.model = self.engine, engine, model
        old.close()
        _say(f"localchat: now answering with {model}: {engine.worker.describe()} "
             f"(loaded in {time.monotonic() - started:.1f} s); the conversation stays.")

    def save(self, name: str) -> None:
        if not name:
            _say("localchat: /save needs a file name: /save chat.md (or chat.json)")
            return
        path = Path(name).expanduser()
        text = (self.conversation.json(self.model, self.sampling) if path.suffix.lower() == ".json"
                else self.conversation.markdown())
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            _say(f"localchat: cannot write {path} ({exc.strerror or exc}); choose another file.")
            return
        _say(f"localchat: saved {len(self.conversation.turns)} messages to {path}")

    # -- a turn -----------------------------------------------------------------------------

    def answer(self, text: str) -> None:
        """Send one message and stream the answer to stdout; its numbers go to stderr."""
        turns = self.conversation.turns
        turns.append({"role": "user", "content": text})
        try:
            stream = self.engine.submit(Request(messages=self.conversation.messages(), sampling=self.sampling))
        except LocalchatError as exc:
            turns.pop()
            _say(f"localchat: {exc}")
            return
        parts: list[str] = []
        stats = ""
        try:
            with ProgressLine(enabled=self.progress) as status:
                status.set("reading the prompt")
                for event in follow(stream, status):
                    if isinstance(event, TextDelta):
                        parts.append(event.text)
                        _write(event.text)
                    elif isinstance(event, Stats):
                        stats = (f"[{event.completion_tokens} tokens, {event.tokens_per_s:.1f} tok/s, "
                                 f"TTFT {event.ttft_ms:.0f} ms]")
                    elif isinstance(event, Done):
                        _write("\n")  # each answer ends its line: piped answers stay apart
                        if stats:
                            _say(stats)
                    elif isinstance(event, Failed):
                        _write("\n" if parts else "")
                        _say(f"localchat: {event.message}")
                        turns.pop()  # the question goes too: the next turn starts from a whole conversation
                        return
        except KeyboardInterrupt:
            stream.cancel()
            for _ in stream:
                pass
            _write("\n")
            _say("[stopped]")
        turns.append({"role": "assistant", "content": "".join(parts), "model": self.model})


def _lines(interactive: bool) -> Iterator[str]:
    """The lines typed (after a `> ` prompt on a terminal) or piped in, stripped, until the end of input."""
    if interactive and sys.stdout.isatty():
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:  # Windows
            pass
    while True:
        if not interactive:
            line = sys.stdin.readline()
            if not line:
                return
            yield line.strip()
            continue
        try:
            if sys.stdout.isatty():
                line = input("> ")
            else:  # the answers go to a file or a pipe: the prompt goes where the user looks
                _say("> ", end="")
                line = input()
        except EOFError:
            _say("")
            return
        yield line.strip()


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _say(text: str, end: str = "\n") -> None:
    print(text, end=end, file=sys.stderr, flush=True)
