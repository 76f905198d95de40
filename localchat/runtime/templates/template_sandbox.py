"""Jinja2's immutable sandbox with bounds on time, loops and sizes, for chat templates from model files.

The sandbox already keeps a template from reaching Python's internals; it does not keep one from
looping for hours or building a string of gigabytes. Here every render runs within a Budget: a
watchdog interrupts it when its time is up or its request is cancelled, range() counts its
items, and the operations that multiply sizes (`*`, `**`, padding, join, replace, indent,
format widths, namespace assignment) are checked before they run.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import operator
import threading
import time
from typing import Any, Callable, Iterator, TypeVar

from jinja2 import TemplateError, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from ...errors import RequestError

MAX_LOOP_ITEMS = 100_000  # range() items in one request's renders
MAX_NUMBER = 100_000  # any count a template passes to a call or filter (widths, repeats)
MAX_SIZE = 20_000_000  # characters or items of any one value a template makes
RENDER_SECONDS = 5.0

T = TypeVar("T")
_current: contextvars.ContextVar["Budget | None"] = contextvars.ContextVar("localchat_budget", default=None)


def current_budget() -> "Budget | None":
    """The budget of the request this thread works on, if its caller set one."""
    return _current.get()


class Budget:
    """How long turning one request into tokens may take, and whether its client has left.

    Rendering is pure Python that may loop without end: a watchdog thread interrupts it (an
    asynchronous exception) when the time is up or the request is cancelled. Tokenizing checks
    between the prompt's pieces.
    """

    def __init__(self, seconds: float = RENDER_SECONDS) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.cancelled = threading.Event()
        self.loop_items = 0

    def cancel(self) -> None:
        """The client left (or the server stops): the work ends at its next check."""
        self.cancelled.set()

    def over(self) -> bool:
        return self.cancelled.is_set() or time.monotonic() > self.deadline

    def check(self, what: str) -> None:
        if self.cancelled.is_set():
            raise RequestError(f"stopped {what}: the request was cancelled.")
        if time.monotonic() > self.deadline:
            raise RequestError(f"{what} took more than {self.seconds:.0f} s; shorten the request.")

    def spend_loop(self) -> None:
        self.loop_items += 1
        if self.loop_items > MAX_LOOP_ITEMS:
            raise TemplateError(f"it loops more than {MAX_LOOP_ITEMS:,} times")

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) with this budget as the current one (for a worker thread)."""
        token = _current.set(self)
        try:
            return fn(*args)
        finally:
            _current.reset(token)

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Interrupt this thread's work inside the block once the budget is spent."""
        target, done, lock = threading.get_ident(), threading.Event(), threading.Lock()
        fired = False

        def watch() -> None:
            nonlocal fired
            while not done.wait(0.05):
                if self.over():
                    with lock:
                        if not done.is_set():
                            fired = True
                            _interrupt(target, Interrupted)
                    return

        threading.Thread(target=watch, name="localchat-render-watch", daemon=True).start()
        try:
            yield
        finally:
            with lock:
                done.set()
                if fired:  # delivered already, or still pending: then it must not land elsewhere
                    _interrupt(target, None)


class Interrupted(RequestError):
    """Raised inside a render by its watchdog."""

    def __init__(self) -> None:
        super().__init__("the model's chat template took too long on these messages (or the request was "
                         "cancelled); shorten the conversation or use another model.", "messages")


def _interrupt(thread_id: int, exc: type[BaseException] | None) -> None:
    # None clears a pending exception: ctypes passes it as NULL.
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exc) if exc is not None else None)


# -- size checks ---------------------------------------------------------------------------------


def _refuse_size(n: int) -> None:
    if n > MAX_SIZE:
        raise TemplateError(f"it builds a value of {n:,} characters or items")


def _check_numbers(args: tuple, kwargs: dict) -> None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_NUMBER:
            raise TemplateError(f"it passes the number {value} to a function")


def _check_format(spec: Any) -> None:
    # A width or precision in a format string ("%99999999s", "{:>99999999}") pads without bound.
    if isinstance(spec, str) and any(len(run) > 5 for run in "".join(c if c.isdigit() else " " for c in spec).split()):
        raise TemplateError("its format string asks for a huge width")


def _check_result(value: Any) -> Any:
    if isinstance(value, (str, list, tuple, dict)):
        _refuse_size(len(value))
    return value


def _length(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple, dict)) else 16


def _precheck(name: str, target: Any, args: tuple) -> None:
    """Refuse, before it runs, a call whose result would be far too large."""
    if name == "join":  # sep.join(items) or items|join(sep)
        items, sep = (args[0], target) if isinstance(target, str) else (target, args[0] if args else "")
        if isinstance(items, (list, tuple)):
            _refuse_size(_length(sep) * len(items) + sum(_length(x) for x in items))
    elif name == "replace" and isinstance(target, str) and len(args) >= 2:
        old, new = args[0], args[1]
        _refuse_size(len(target) + (len(target) + 1) * _length(new) // max(_length(old), 1))
    elif name == "indent" and isinstance(target, str):
        width = args[0] if args else 4
        _refuse_size(len(target) + target.count("\n") * (_length(width) if isinstance(width, str) else int(width)))
    elif name in ("format", "format_map"):
        _check_format(target)
    elif name == "append" and isinstance(target, list):
        _refuse_size(len(target) + 1)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox with the checks above on calls, filters, `*`, `**`, `%` and range()."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.filters = {name: _bounded_filter(name, fn) for name, fn in self.filters.items()}
        self.globals["range"] = _bounded_range
        self.globals["namespace"] = _BoundedNamespace

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        # Kimi K2's templates queue call ids in a list with append and pop (llama.cpp's renderer allows them):
        # a list may grow, one item a call, within the size, loop and time bounds, and shrink.
        if isinstance(obj, list) and attr in ("append", "pop"):
            return True
        return super().is_safe_attribute(obj, attr, value)

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "**":
            if isinstance(right, int) and abs(right) > 64 and left not in (0, 1, -1):
                raise TemplateError("it raises a number to a huge power")
            return operator.pow(left, right)
        if operator_name == "%":
            _check_format(left)
            return operator.mod(left, right)
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                _refuse_size(len(seq) * count)
        return operator.mul(left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _check_numbers(args, kwargs)
        _precheck(getattr(__obj, "__name__", ""), getattr(__obj, "__self__", None), args)
        return _check_result(super().call(__context, __obj, *args, **kwargs))


def _bounded_filter(name: str, fn: Callable) -> Callable:
    @functools.wraps(fn)  # keeps Jinja's pass_context / pass_environment marks
    def bounded(*args: Any, **kwargs: Any) -> Any:
        # Drop a passed context or env (an Undefined answers hasattr by raising: it is a value, kept).
        values = [a for a in args if isinstance(a, Undefined) or not hasattr(a, "environment")]
        _check_numbers(tuple(values[1:]), kwargs)
        if values and not isinstance(values[0], Undefined):  # `x | default(...)` of a variable never set
            _precheck(name, values[0], tuple(values[1:]) + tuple(kwargs.values()))
        return _check_result(fn(*args, **kwargs))
    return bounded


def _bounded_range(*args: int) -> Iterator[int]:
    _check_numbers(args, {})
    budget = current_budget()
    for i in range(*args):
        if budget is not None:
            budget.spend_loop()
        yield i


class _BoundedNamespace(Namespace):
    """namespace() whose attributes cannot hold values over the size bound (`ns.s = ns.s ~ ns.s`)."""

    def __setitem__(self, name: str, value: Any) -> None:
        _check_result(value)
        super().__setitem__(name, value)
