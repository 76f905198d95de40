"""The `localchat` command. Errors print one line and exit non-zero; no tracebacks."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Callable

from .arguments import Parser, closest
from .assemble import progress_bar
from .command_flags import (engine_args, file_name, key_arg, plan_settings, sampling_args, sampling_from,
                            warn_about_key_flags, window_args, window_epilog)
from .config import TOP, Settings, add_flags, flag_values, load_settings
from .errors import LocalchatError
from .ingest.kinds import listing as document_kinds
from .logging_setup import one_line_user_errors

# Subcommands with their own argument parsers: everything after the name is passed through.
DELEGATED = {
    "probe": ("localchat.hardware.probe", "show this machine's CPU, memory and GPUs"),
    "plan": ("localchat.tune.plan", "choose the best model, quant and placement for a machine"),
    "tune": ("localchat.tune.wizard", "measure this machine and keep the fastest good model (hardware wizard)"),
}


COMMANDS = {"chat", "pull", "import", "models", "serve", "mcp", "ui", "bench", "selftest", *DELEGATED}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="localchat", description="Chat with the best local model your machine can run.",
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(parser, TOP)  # --verbose
    sub = parser.add_subparsers(dest="command")

    chat = sub.add_parser("chat", help="answer PROMPT, or chat in the terminal without one")
    engine_args(chat, "chat")
    sampling_args(chat)
    chat.add_argument("--json", action="store_true", help="print one JSON object with the answer and its stats")
    chat.add_argument("--json-schema", dest="json_schema", metavar="FILE", type=file_name,
                      help="answer with JSON valid under the JSON schema in FILE (enforced while sampling)")
    chat.add_argument("--file", action="append", default=[], dest="files", metavar="PATH", type=file_name,
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
    engine_args(serve, "serve")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1; any other needs --listen)")
    serve.add_argument("--port", type=int, help="port (default 8000, or the next free one after it)")
    serve.add_argument("--ollama-port", type=int, metavar="PORT",
                       help="also serve on this port (Ollama's is 11434), for apps that expect Ollama at its "
                            "address; same host, same key")
    serve.add_argument("--listen", action="store_true",
                       help="accept connections from other machines (binds 0.0.0.0 unless --host; needs a key, "
                            "best set as LOCALCHAT_API_KEY)")
    key_arg(serve, "--api-key", "require 'Authorization: Bearer KEY' on every API request")
    serve.add_argument("--backend", help="forward to this OpenAI-compatible server (e.g. http://host:8080/v1) "
                                         "instead of running a local model")
    key_arg(serve, "--backend-key", "bearer token to send to the --backend server")
    serve.add_argument("--cors-origin", dest="cors_origins", action="append", default=[], metavar="ORIGIN",
                       help="let web pages from ORIGIN (e.g. http://localhost:3000) call the API; repeatable")
    sampling_args(serve, "API requests")

    mcp = sub.add_parser("mcp", help="serve localchat as an MCP server over stdio (the local model, your documents "
                                     "and chats, for Claude Desktop, Cursor or any agent)")
    engine_args(mcp, "serve")

    ui = sub.add_parser("ui", help="open the chat window in the browser (the default without a command)")
    engine_args(ui, "ui")
    sampling_args(ui, "new chats and API requests")
    parser.epilog = window_epilog(window_args(ui))

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
            return _guarded(lambda: module.main(rest[1:], settings=plan_settings))
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
        "serve": _cmd_serve, "mcp": _cmd_mcp, "ui": _cmd_ui, "selftest": _cmd_selftest,
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


def _cmd_chat(args: argparse.Namespace) -> int:
    from .terminal import chat

    sampling = sampling_from(args)
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
                           sampling=sampling_from(args), ollama_port=args.ollama_port)
    return serve_api(options, lambda model: _settings(args, model), progress=not args.verbose)


def _cmd_mcp(args: argparse.Namespace) -> int:
    from .launch import serve_mcp

    return serve_mcp(lambda model: _settings(args, model))


def _cmd_ui(args: argparse.Namespace) -> int:
    from .api.app import ServeOptions
    from .launch import open_window

    options = ServeOptions(host=args.host, port=args.port, listen=args.listen, api_key=args.api_key,
                           cors_origins=tuple(args.cors_origins), sampling=sampling_from(args))
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
