"""The `localchat` command. Errors print one line and exit non-zero; no tracebacks."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import textwrap
from typing import Callable

from .arguments import Parser, closest
from .assemble import progress_bar
from .config import PLACEMENT_HELP, TOP, Settings, add_flags, flag_values, load_settings
from .key_options import KEY_FLAGS, key_flag
from .errors import LocalchatError
from .ingest.kinds import listing as document_kinds
from .logging_setup import one_line_user_errors

# Subcommands with their own argument parsers: everything after the name is passed through.
DELEGATED = {
    "probe": ("localchat.hardware.probe", "show this machine's CPU, memory and GPUs"),
    "plan": ("localchat.tune.plan", "choose the best model, quant and placement for a machine"),
    "tune": ("localchat.tune.wizard", "measure this machine and keep the fastest good model (hardware wizard)"),
}


COMMANDS = {"chat", "pull", "import", "models", "serve", "ui", "bench", "selftest", *DELEGATED}


def _plan_settings(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], float]:
    """`plan`'s settings flags (--speed-target), and the speed target read from them once parsed: the flag,
    else the environment, else settings.toml, else its default (config.py)."""
    add_flags(parser, "plan")
    return lambda args: load_settings(flag_values(args)).speed_target


def _engine_args(parser: argparse.ArgumentParser, command: str) -> None:
    add_flags(parser, command)  # from the settings' declarations (config.py)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # keeps the epilog's one line per placement
    parser.epilog = "placements (--placement):\n" + "\n".join(
        f"  {name:<13}{about}" for name, about in PLACEMENT_HELP.items())


def _window_args(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The chat window's own options (`localchat ui`, and `localchat` without a command)."""
    return [
        parser.add_argument("--host", help="address to bind (default 127.0.0.1; any other needs --listen)"),
        parser.add_argument("--port", type=int, help="port (default 7860, or the next free one after it)"),
        parser.add_argument("--listen", action="store_true",
                            help="accept connections from other machines (needs a key, best set as LOCALCHAT_API_KEY: "
                                 "the window asks for it as the password of the user 'localchat', the API as a "
                                 "bearer token)"),
        _key_arg(parser, "--api-key", "require this key on the window and the API"),
        parser.add_argument("--no-browser", dest="browser", action="store_false",
                            help="print the window's address instead of opening a browser"),
        parser.add_argument("--cors-origin", dest="cors_origins", action="append", default=[], metavar="ORIGIN",
                            help="let web pages from ORIGIN (e.g. http://localhost:3000) call the API; repeatable"),
    ]


def _key_arg(parser: argparse.ArgumentParser, flag: str, about: str) -> argparse.Action:
    """A key option that steers to its environment variable: a command line is readable by every user."""
    env = KEY_FLAGS[flag]
    return parser.add_argument(flag, dest=flag[2:].replace("-", "_"), default=os.environ.get(env), metavar="KEY",
                               help=f"{about}; set {env} instead: this option's value shows in the process list "
                                    "(ps) to every user of this machine")


def warn_about_key_flags(argv: list[str]) -> None:
    """A warning on stderr for each key given on the command line (not for one from the environment)."""
    given = dict.fromkeys(name for arg in argv if (name := key_flag(arg.split("=", 1)[0])))
    for flag in given:
        print(f"localchat: warning: the key given with {flag} can be read by every user of this machine in the "
              f"process list (ps, /proc/PID/cmdline); set {KEY_FLAGS[flag]} in the environment instead.",
              file=sys.stderr, flush=True)


def _flag(action: argparse.Action) -> str:
    takes_value = action.nargs != 0
    return action.option_strings[0] + (f" {(action.metavar or action.dest).upper()}" if takes_value else "")


def _window_epilog(window: list[argparse.Action]) -> str:
    """How to start the window, for the top-level help: the options come from the `ui` parser itself."""
    lines = ["Without a command, localchat opens the chat window, as `localchat ui` does, and takes the",
             "same options (`localchat --no-browser --port 7861`):"]
    for action in window:
        flag = _flag(action)
        if len(flag) >= 20:  # as argparse does: a long flag gets a line of its own
            lines.append(f"  {flag}")
        lines.append(textwrap.fill(action.help or "", width=100, subsequent_indent=" " * 22,
                                   initial_indent=f"  {flag:<20}" if len(flag) < 20 else " " * 22))
    lines.append("  and the model options (--model, --n-ctx, --placement, ...: `localchat ui --help` lists them).")
    return "\n".join(lines)


# Sampling flags (--top-p sets top_p): one per limited parameter of runtime/sampling.py but the seed,
# which only `chat` takes. Unset ones keep SamplingParams' own defaults, and SamplingParams.validate
# checks them against the limits the API and the window share.
def _sampling_flags() -> list[str]:
    from .runtime.sampling import LIMITS

    return [name for name in LIMITS if name != "seed"]


def _sampling_args(parser: argparse.ArgumentParser, defaults_for: str = "") -> None:
    """`chat`'s sampling flags; with `defaults_for`, the defaults of what the window or the API is
    not told per request (a request's own values win)."""
    from .runtime.sampling import LIMITS, SamplingParams

    group = parser.add_argument_group(f"sampling defaults for {defaults_for}" if defaults_for else "sampling")
    base = SamplingParams()
    for dest in _sampling_flags():
        default = getattr(base, dest)
        about = f"default {default}" if default is not None else "answer length limit in tokens"
        limit = LIMITS[dest]
        group.add_argument("--" + dest.replace("_", "-"), type=limit.kind, dest=dest, help=f"{about}; {limit.words()}")
    if not defaults_for:
        group.add_argument("--system", help="system prompt")
        group.add_argument("--seed", type=LIMITS["seed"].kind, help=LIMITS["seed"].words())
        group.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def _named(text: str) -> str:
    """A file name given to a flag: an empty one (`--file ""`) is refused, never read as no file."""
    if not text.strip():
        raise argparse.ArgumentTypeError("needs a file name, not an empty string")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="localchat", description="Chat with the best local model your machine can run.",
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(parser, TOP)  # --verbose
    sub = parser.add_subparsers(dest="command")

    chat = sub.add_parser("chat", help="answer PROMPT, or chat in the terminal without one")
    _engine_args(chat, "chat")
    _sampling_args(chat)
    chat.add_argument("--json", action="store_true", help="print one JSON object with the answer and its stats")
    chat.add_argument("--json-schema", dest="json_schema", metavar="FILE", type=_named,
                      help="answer with JSON valid under the JSON schema in FILE (enforced while sampling)")
    chat.add_argument("--file", action="append", default=[], dest="files", metavar="PATH", type=_named,
                      help=f"a document to ask about ({document_kinds()}; repeatable)")
    chat.add_argument("prompt", nargs="?", help="the question; omit it for an interactive chat")

    pull = sub.add_parser("pull", help="download a catalog model")
    pull.add_argument("name", help="catalog name, optionally NAME:QUANT")

    imported = sub.add_parser("import", help="add a GGUF file of yours to localchat's models folder (linked, not "
                                             "copied, where the disk allows)")
    imported.add_argument("path", help="the .gguf file")
    sub.add_parser("models", help="list local and catalog models")
    for name, (_, about) in DELEGATED.items():
        sub.add_parser(name, help=about, add_help=False)

    serve = sub.add_parser("serve", help="serve the API (OpenAI's, Anthropic's and Ollama's protocols) without the "
                                         "UI (127.0.0.1 by default)")
    _engine_args(serve, "serve")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1; any other needs --listen)")
    serve.add_argument("--port", type=int, help="port (default 8000, or the next free one after it)")
    serve.add_argument("--ollama-port", type=int, metavar="PORT",
                       help="also serve on this port (Ollama's is 11434), for apps that expect Ollama at its "
                            "address; same host, same key")
    serve.add_argument("--listen", action="store_true",
                       help="accept connections from other machines (binds 0.0.0.0 unless --host; needs a key, "
                            "best set as LOCALCHAT_API_KEY)")
    _key_arg(serve, "--api-key", "require 'Authorization: Bearer KEY' on every API request")
    serve.add_argument("--backend", help="forward to this OpenAI-compatible server (e.g. http://host:8080/v1) "
                                         "instead of running a local model")
    _key_arg(serve, "--backend-key", "bearer token to send to the --backend server")
    serve.add_argument("--cors-origin", dest="cors_origins", action="append", default=[], metavar="ORIGIN",
                       help="let web pages from ORIGIN (e.g. http://localhost:3000) call the API; repeatable")
    _sampling_args(serve, "API requests")

    ui = sub.add_parser("ui", help="open the chat window in the browser (the default without a command)")
    _engine_args(ui, "ui")
    _sampling_args(ui, "new chats and API requests")
    parser.epilog = _window_epilog(_window_args(ui))

    bench = sub.add_parser("bench", help="run the runtime benchmark (see benchmarks/runtime.py)")
    bench.add_argument("--quick", action="store_true", help="fewer repeats, smaller documents")
    bench.add_argument("--output", help="write the Markdown report here")

    selftest = sub.add_parser("selftest", help="load the model (fetched first only if it is not here, as for chat), "
                                               "generate, serve the window and the API, then report (exit code 0 "
                                               "when all passed)")
    add_flags(selftest, "selftest")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    one_line_user_errors()
    verbose = "--verbose" in argv[:1]
    rest = argv[1:] if verbose else argv
    if rest and rest[0] in DELEGATED:
        if verbose:
            logging.getLogger("localchat").setLevel(logging.DEBUG)
        module = importlib.import_module(DELEGATED[rest[0]][0])
        if rest[0] == "probe":  # the hardware, then the CPU kernels the runtime picked for it
            return _guarded(lambda: _probe(module.main, rest[1:]))
        if rest[0] == "plan":  # its settings (the speed target) come from the declarations, like every command's
            return _guarded(lambda: module.main(rest[1:], settings=_plan_settings))
        return _guarded(lambda: module.main(rest[1:]))
    parser = build_parser()
    if rest and not rest[0].startswith("-") and rest[0] not in COMMANDS:
        # The window takes options only: a word first is a command, perhaps mistyped (`localchat chta`).
        meant = closest(rest[0], sorted(COMMANDS))
        parser.error(f"unknown command '{rest[0]}'" + (f"; did you mean {meant}?" if meant else
                                                        "; `localchat --help` lists the commands"))
    if not rest or (rest[0] not in COMMANDS and rest[0] not in ("-h", "--help")):
        # No command: the chat window, with any options given (`localchat --no-browser`).
        argv = [*(["--verbose"] if verbose else []), "ui", *rest]
    args = parser.parse_args(argv)
    warn_about_key_flags(argv)
    if args.verbose:
        logging.getLogger("localchat").setLevel(logging.DEBUG)
    command = args.command
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "chat": _cmd_chat, "pull": _cmd_pull, "import": _cmd_import, "models": _cmd_models, "bench": _cmd_bench,
        "serve": _cmd_serve, "ui": _cmd_ui, "selftest": _cmd_selftest,
    }
    return _guarded(lambda: handlers[command](args))


def _guarded(run: Callable[[], int]) -> int:
    """Run a command; a LocalchatError becomes one line on stderr and exit code 1."""
    try:
        return run()
    except LocalchatError as exc:
        print(f"localchat: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:  # `localchat models | head`: the reader left, nothing is wrong
        sys.stdout = open(os.devnull, "w")
        return 0


def _settings(args: argparse.Namespace, model: str | None = None) -> Settings:
    """The settings for this command; `model` replaces the flag's (values tuned for another model drop out)."""
    overrides = flag_values(args)
    if model is not None:
        overrides["model"] = model
    return load_settings(overrides)


def _sampling(args: argparse.Namespace):
    """SamplingParams from the sampling flags given; the rest keep their defaults. Checked here, so a
    bad flag fails before the model loads."""
    from .runtime.sampling import SamplingParams

    params = SamplingParams(seed=getattr(args, "seed", None), stop=list(getattr(args, "stop", [])))
    for dest in _sampling_flags():
        if getattr(args, dest, None) is not None:
            setattr(params, dest, getattr(args, dest))
    params.validate()
    return params


def _cmd_chat(args: argparse.Namespace) -> int:
    from .terminal import chat

    sampling = _sampling(args)
    if args.json_schema:
        from .api.constraints import schema_file_grammar

        sampling.grammar = schema_file_grammar(args.json_schema)
    return chat(lambda model: _settings(args, model), sampling, args.prompt, args.files, args.system, args.json,
                progress=not args.verbose)


def _cmd_pull(args: argparse.Namespace) -> int:
    from .models.resolve import resolve_model

    path = resolve_model(args.name, progress=progress_bar(f"fetching {args.name}"))
    print(path)
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .models.own_files import link_in

    placed = link_in(Path(args.path))
    print(f"{placed.said[0].upper()}{placed.said[1:]}: {placed.path}")
    return 0


def _cmd_models(args: argparse.Namespace) -> int:
    from .model_list import list_models

    return list_models()


def _cmd_serve(args: argparse.Namespace) -> int:
    from .api.app import ServeOptions
    from .launch import serve_api

    options = ServeOptions(host=args.host, port=args.port, listen=args.listen, api_key=args.api_key,
                           backend=args.backend, backend_key=args.backend_key, cors_origins=tuple(args.cors_origins),
                           sampling=_sampling(args), ollama_port=args.ollama_port)
    return serve_api(options, lambda model: _settings(args, model), progress=not args.verbose)


def _cmd_ui(args: argparse.Namespace) -> int:
    from .api.app import ServeOptions
    from .launch import open_window

    options = ServeOptions(host=args.host, port=args.port, listen=args.listen, api_key=args.api_key,
                           cors_origins=tuple(args.cors_origins), sampling=_sampling(args))
    return open_window(options, lambda model: _settings(args, model), args.browser, args.verbose)


def _cmd_selftest(args: argparse.Namespace) -> int:
    from .selftest import run_selftest

    return run_selftest(args.model)


def _probe(probe_main, argv: list[str]) -> int:
    from .runtime.backends.gpus import usable
    from .runtime.backends.kernels import describe

    return probe_main(argv, extra_rows=lambda: [("CPU kernels", describe())], usable=usable)


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_runtime_benchmark

    return run_runtime_benchmark(quick=args.quick, output=args.output)
