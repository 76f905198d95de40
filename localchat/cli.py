"""The `localchat` command. Errors print one line and exit non-zero; no tracebacks."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import sys
import textwrap
from typing import Any, Callable

from .assemble import open_engine, progress_bar
from .config import PLACEMENT_HELP, PLACEMENTS, Settings, load_settings
from .errors import LocalchatError, RequestError
from .logging_setup import one_line_user_errors

log = logging.getLogger("localchat")

# Subcommands with their own argument parsers: everything after the name is passed through.
DELEGATED = {
    "probe": ("localchat.hardware.probe", "show this machine's CPU, memory and GPUs"),
    "plan": ("localchat.tune.plan", "choose the best model, quant and placement for a machine"),
    "tune": ("localchat.tune.wizard", "measure this machine and keep the fastest good model (hardware wizard)"),
}


COMMANDS = {"chat", "pull", "models", "serve", "ui", "bench", "selftest", *DELEGATED}


def _engine_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="catalog name (see `localchat models`) or a .gguf path")
    parser.add_argument("--n-ctx", type=int, dest="n_ctx", help="context window in tokens")
    parser.add_argument("--threads", type=int, dest="n_threads", help="CPU threads (default: physical cores)")
    parser.add_argument("--step-budget", type=int, dest="step_budget",
                        help="prompt tokens per step beside streaming chats (default: adaptive)")
    parser.add_argument("--deterministic", action="store_true", default=None,
                        help="identical greedy output however prompts are chunked or reused (slower prefill)")
    parser.add_argument("--draft", help="draft model for speculative decoding (catalog name or .gguf path)")
    parser.add_argument("--lookup", action="store_true", default=None,
                        help="speculate with prompt lookup (n-grams of the prompt), even if a draft model is paired")
    parser.add_argument("--no-spec", dest="speculation", action="store_false", default=None,
                        help="plain decoding, no speculation")
    parser.add_argument("--placement", choices=PLACEMENTS,
                        help="where the model runs (default auto; each placement is explained below)")
    parser.add_argument("--devices", help="GPU indices for the placement, like 0,1 (default: all)")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # keeps the epilog's one line per placement
    parser.epilog = "placements (--placement):\n" + "\n".join(
        f"  {name:<13}{about}" for name, about in PLACEMENT_HELP.items())


def _window_args(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The chat window's own options (`localchat ui`, and `localchat` without a command)."""
    return [
        parser.add_argument("--host", help="address to bind (default 127.0.0.1; any other needs --listen)"),
        parser.add_argument("--port", type=int, help="port (default 7860, or the next free one after it)"),
        parser.add_argument("--listen", action="store_true",
                            help="accept connections from other machines (needs --api-key: the window asks for it "
                                 "as the password of the user 'localchat', the API as a bearer token)"),
        parser.add_argument("--api-key", dest="api_key", default=os.environ.get("LOCALCHAT_API_KEY"),
                            help="require this key on the window and the API (or LOCALCHAT_API_KEY)"),
        parser.add_argument("--no-browser", dest="browser", action="store_false",
                            help="print the window's address instead of opening a browser"),
        parser.add_argument("--cors-origin", dest="cors_origins", action="append", default=[], metavar="ORIGIN",
                            help="let web pages from ORIGIN (e.g. http://localhost:3000) call the API; repeatable"),
    ]


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


# Sampling flags; unset ones keep SamplingParams' own defaults (one place for them).
_SAMPLING_FLAGS = (("--temperature", float, "temperature"), ("--top-p", float, "top_p"), ("--top-k", int, "top_k"),
                   ("--min-p", float, "min_p"), ("--repeat-penalty", float, "repeat_penalty"),
                   ("--max-tokens", int, "max_tokens"))


def _sampling_args(parser: argparse.ArgumentParser, defaults_for: str = "") -> None:
    """`chat`'s sampling flags; with `defaults_for`, the defaults of what the window or the API is
    not told per request (a request's own values win)."""
    from .runtime.sampling import SamplingParams

    group = parser.add_argument_group(f"sampling defaults for {defaults_for}" if defaults_for else "sampling")
    base = SamplingParams()
    for flag, kind, dest in _SAMPLING_FLAGS:
        default = getattr(base, dest)
        group.add_argument(flag, type=kind, dest=dest,
                           help=f"default {default}" if default is not None else "answer length limit in tokens")
    if not defaults_for:
        group.add_argument("--system", help="system prompt")
        group.add_argument("--seed", type=int)
        group.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="localchat", description="Chat with the best local model your machine can run.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true", help="show llama.cpp's log and debug messages")
    sub = parser.add_subparsers(dest="command")

    chat = sub.add_parser("chat", help="answer PROMPT, or chat in the terminal without one")
    _engine_args(chat)
    _sampling_args(chat)
    chat.add_argument("--json", action="store_true", help="print one JSON object with the answer and its stats")
    chat.add_argument("--file", action="append", default=[], dest="files", metavar="PATH",
                      help="a document to ask about (PDF, DOCX, TXT, MD, HTML, source; repeatable)")
    chat.add_argument("prompt", nargs="?", help="the question; omit it for an interactive chat")

    pull = sub.add_parser("pull", help="download a catalog model")
    pull.add_argument("name", help="catalog name, optionally NAME:QUANT")

    sub.add_parser("models", help="list local and catalog models")
    for name, (_, about) in DELEGATED.items():
        sub.add_parser(name, help=about, add_help=False)

    serve = sub.add_parser("serve", help="serve the OpenAI-compatible API without the UI (127.0.0.1 by default)")
    _engine_args(serve)
    serve.add_argument("--host", help="address to bind (default 127.0.0.1; any other needs --listen)")
    serve.add_argument("--port", type=int, help="port (default 8000, or the next free one after it)")
    serve.add_argument("--listen", action="store_true",
                       help="accept connections from other machines (binds 0.0.0.0 unless --host; needs --api-key)")
    serve.add_argument("--api-key", dest="api_key", default=os.environ.get("LOCALCHAT_API_KEY"),
                       help="require 'Authorization: Bearer KEY' on every API request (or LOCALCHAT_API_KEY)")
    serve.add_argument("--backend", help="forward to this OpenAI-compatible server (e.g. http://host:8080/v1) "
                                         "instead of running a local model")
    serve.add_argument("--backend-key", dest="backend_key", help="bearer token to send to the --backend server")
    serve.add_argument("--cors-origin", dest="cors_origins", action="append", default=[], metavar="ORIGIN",
                       help="let web pages from ORIGIN (e.g. http://localhost:3000) call the API; repeatable")
    _sampling_args(serve, "API requests")

    ui = sub.add_parser("ui", help="open the chat window in the browser (the default without a command)")
    _engine_args(ui)
    _sampling_args(ui, "new chats and API requests")
    parser.epilog = _window_epilog(_window_args(ui))

    bench = sub.add_parser("bench", help="run the runtime benchmark (see benchmarks/runtime.py)")
    bench.add_argument("--quick", action="store_true", help="fewer repeats, smaller documents")
    bench.add_argument("--output", help="write the Markdown report here")

    selftest = sub.add_parser("selftest", help="load the model, generate, serve the window and the API, "
                                               "then report (offline; exit code 0 when all passed)")
    selftest.add_argument("--model", help="catalog name or .gguf path (default: the configured model)")
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
        return _guarded(lambda: module.main(rest[1:]))
    parser = build_parser()
    if not rest or (rest[0] not in COMMANDS and rest[0] not in ("-h", "--help")):
        # No command: the chat window, with any options given (`localchat --no-browser`).
        argv = [*(["--verbose"] if verbose else []), "ui", *rest]
    args = parser.parse_args(argv)
    if args.verbose:
        logging.getLogger("localchat").setLevel(logging.DEBUG)
    command = args.command
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "chat": _cmd_chat, "pull": _cmd_pull, "models": _cmd_models, "bench": _cmd_bench,
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
    keys = ("model", "n_ctx", "n_threads", "step_budget", "deterministic", "draft", "lookup", "speculation",
            "placement", "devices")
    overrides: dict[str, Any] = {k: getattr(args, k, None) for k in keys}
    if model is not None:
        overrides["model"] = model
    overrides["verbose"] = args.verbose or None
    return load_settings(overrides)


def _sampling(args: argparse.Namespace):
    """SamplingParams from the sampling flags given; the rest keep their defaults. Checked here, so a
    bad flag fails before the model loads."""
    from .runtime.sampling import SamplingParams

    params = SamplingParams(seed=getattr(args, "seed", None), stop=list(getattr(args, "stop", [])))
    for _, _, dest in _SAMPLING_FLAGS:
        if getattr(args, dest, None) is not None:
            setattr(params, dest, getattr(args, dest))
    params.validate()
    return params


def _cmd_chat(args: argparse.Namespace) -> int:
    from .runtime.sampling import SamplingParams

    settings = _settings(args)
    sampling = _sampling(args) if hasattr(args, "temperature") else SamplingParams()
    documents = _read_documents(args.files)  # before the model loads: a broken file fails fast
    if documents and args.prompt is None:
        raise RequestError("--file needs a question: localchat chat --file PATH \"What does it say about ...?\"")
    from .progress_line import ProgressLine

    # --verbose prints llama.cpp's log on stderr, which a redrawn line would garble.
    with ProgressLine(enabled=not args.verbose) as line, open_engine(settings, status=line.set) as engine:
        if args.prompt is None:
            line.clear()
            return _interactive(engine, args.system, sampling, progress=not args.verbose)
        messages = ([{"role": "system", "content": args.system}] if args.system else [])
        included = None
        content = args.prompt
        if documents:
            content, included = _fit_documents(engine, messages, args.prompt, documents, sampling.max_tokens)
            if not args.json:
                line.note(f"Included: {included.summary()}")
        messages.append({"role": "user", "content": content})
        return _answer_once(engine, messages, sampling, args.json, included, line)


def _read_documents(paths: list[str]) -> list:
    from pathlib import Path

    from .ingest import extract

    return [extract(Path(p)) for p in paths]


def _fit_documents(engine, messages: list[dict[str, str]], question: str, documents: list, max_tokens: int | None):
    """The user turn with whole documents or their best chunks, and what was included."""
    from .ingest import build_prompt, select
    from .ingest.fit import document_budget
    from .runtime.engine import Request

    history = len(engine.prompt_tokens(Request(messages=messages))) if messages else 0
    budget = document_budget(engine.n_ctx, history, max_tokens)
    selection = select(question, documents, budget, engine.count_tokens)
    return build_prompt(question, selection), selection


def _answer_once(engine, messages: list[dict[str, str]], sampling, as_json: bool, included, line) -> int:
    from .progress_line import follow
    from .runtime.engine import Request
    from .runtime.events import Stats, TextDelta, collect

    line.set("reading the prompt")
    events = follow(engine.submit(Request(messages=messages, sampling=sampling)), line)
    if as_json:
        result = collect(events)
        stats = result.stats
        answer = {
            "text": result.text, "finish_reason": result.finish_reason,
            "prompt_tokens": stats.prompt_tokens, "cached_tokens": stats.cached_tokens,
            "completion_tokens": stats.completion_tokens, "ttft_ms": round(stats.ttft_ms, 1),
            "tokens_per_s": round(stats.tokens_per_s, 1),
        }
        if stats.spec is not None:
            spec = stats.spec
            answer["speculation"] = {
                "drafter": spec.drafter, "drafted": spec.drafted, "accepted": spec.accepted,
                "acceptance": round(spec.acceptance, 3), "target_passes": spec.target_passes,
                "mean_accepted": round(spec.accepted / spec.target_passes, 2) if spec.target_passes else 0.0,
                "mean_k": round(spec.mean_k, 2), "tokens_per_pass": round(spec.tokens_per_pass, 2),
                "predicted_speedup": (round(spec.predicted_speedup, 2)
                                      if spec.predicted_speedup is not None else None),
            }
        if stats.kv_transfer_bytes:
            answer["kv_transfer"] = {"ms": round(stats.kv_transfer_ms, 1), "bytes": stats.kv_transfer_bytes}
        if included is not None:
            answer["included"] = included.to_dict()
        print(json.dumps(answer, ensure_ascii=False))
        return 0
    for event in events:
        if isinstance(event, TextDelta):
            sys.stdout.write(event.text)
            sys.stdout.flush()
        elif isinstance(event, Stats):
            log.info("%d prompt + %d tokens, TTFT %.0f ms, %.1f tokens/s", event.prompt_tokens,
                     event.completion_tokens, event.ttft_ms, event.tokens_per_s)
        elif event.kind == "error":
            raise event.error
    sys.stdout.write("\n")
    return 0


def _interactive(engine, system: str | None, sampling, progress: bool) -> int:
    from .progress_line import ProgressLine, follow
    from .runtime.engine import Request
    from .runtime.events import Done, Failed, Stats, TextDelta

    history: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    print(f"localchat: {engine.worker.describe()} - type a message; /reset clears, /exit or Ctrl-D quits, "
          "Ctrl-C stops an answer.", file=sys.stderr)
    while True:
        try:
            line = input("> ").strip()
        except EOFError:
            print(file=sys.stderr)
            return 0
        if not line:
            continue
        if line in ("/exit", "/quit"):
            return 0
        if line == "/reset":
            history = history[:1] if system else []
            continue
        history.append({"role": "user", "content": line})
        try:
            stream = engine.submit(Request(messages=history, sampling=sampling))
        except LocalchatError as exc:
            history.pop()
            print(f"localchat: {exc}", file=sys.stderr)
            continue
        parts: list[str] = []
        try:
            with ProgressLine(enabled=progress) as line:
                line.set("reading the prompt")
                for event in follow(stream, line):
                    if isinstance(event, TextDelta):
                        parts.append(event.text)
                        sys.stdout.write(event.text)
                        sys.stdout.flush()
                    elif isinstance(event, Stats):
                        stats = f"[{event.completion_tokens} tokens, {event.tokens_per_s:.1f} tok/s, TTFT {event.ttft_ms:.0f} ms]"
                    elif isinstance(event, Failed):
                        print(f"\nlocalchat: {event.message}", file=sys.stderr)
                    elif isinstance(event, Done):
                        print(f"\n{stats}", file=sys.stderr)
        except KeyboardInterrupt:
            stream.cancel()
            for _ in stream:
                pass
            print("\n[stopped]", file=sys.stderr)
        history.append({"role": "assistant", "content": "".join(parts)})


def _cmd_pull(args: argparse.Namespace) -> int:
    from .models.resolve import resolve_model

    path = resolve_model(args.name, progress=progress_bar(f"fetching {args.name}"))
    print(path)
    return 0


def _cmd_models(args: argparse.Namespace) -> int:
    from .models.catalog import load_catalog
    from .models.download import cached_file

    print(f"{'NAME':<28} {'QUANT':<8} {'SIZE':>8}  STATUS")
    for key, entry in sorted(load_catalog().items()):
        for quant, model_file in entry.files.items():
            local = cached_file(model_file)
            status = f"local: {local}" if local else "not downloaded"
            print(f"{key + ':' + quant:<28} {quant:<8} {model_file.size / 1e6:>6.0f}MB  {status}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from .api.app import ServeOptions, serve
    from .api.local import served_name

    options = ServeOptions(host=args.host, port=args.port, listen=args.listen, api_key=args.api_key,
                           backend=args.backend, backend_key=args.backend_key, cors_origins=tuple(args.cors_origins),
                           sampling=_sampling(args))
    options.bind_host()  # refuse an unsafe address before spending time on a model
    if args.backend:
        return serve(options)
    settings = _settings(args)
    from .progress_line import ProgressLine

    with ProgressLine(enabled=not args.verbose) as line, open_engine(settings, status=line.set) as engine:
        line.clear()  # the banner comes next
        return serve(options, engine, served_name(settings.model))


def _cmd_ui(args: argparse.Namespace) -> int:
    from .ui import instance
    from .api.app import ServeOptions
    from .ui.web import DEFAULT_UI_PORT, run_ui

    instance.log_to_file(args.verbose)
    # A plain start (a double-click) while a window runs opens that one; a start that names a
    # host, port or --listen asks for a server of its own, which the next plain start ignores.
    plain = args.host is None and args.port is None and not args.listen
    if plain:
        running = instance.running_instance()
        if running is not None:
            print(f"localchat is already running at {running.url}/ (process {running.pid}); "
                  f"{'opening it' if args.browser else 'open that address'} instead of starting another.",
                  flush=True)
            if args.browser:
                instance.open_browser(running.url)
            return 0
    options = ServeOptions(host=args.host, port=args.port, listen=args.listen, api_key=args.api_key,
                           cors_origins=tuple(args.cors_origins), sampling=_sampling(args))
    host = options.bind_host()  # refuse an unsafe address before spending time on a model
    settings = _settings(args)
    options.port, url = instance.reserve_url(host, options.port, DEFAULT_UI_PORT)

    def load(model: str):
        return open_engine(settings if model == settings.model else _settings(args, model))

    try:
        with instance.recorded(url) if plain else contextlib.nullcontext():
            return run_ui(options, load, settings.model, open_browser=args.browser)
    except LocalchatError as exc:
        # Into the log file (the console shows it once, below): a bundle's window may close unread.
        log.info("stopped: %s", exc)
        raise


def _cmd_selftest(args: argparse.Namespace) -> int:
    from .selftest import run_selftest

    return run_selftest(args.model, open_engine)


def _probe(probe_main, argv: list[str]) -> int:
    from .runtime.backends import describe

    return probe_main(argv, extra_rows=lambda: [("CPU kernels", describe())])


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_runtime_benchmark

    return run_runtime_benchmark(quick=args.quick, output=args.output)
