"""How the log shows errors: an expected user error is one line with its hint, a bug keeps its traceback."""

from __future__ import annotations

import logging
from typing import Any

from .errors import LocalchatError


def one_line_user_errors() -> None:
    """Fold a LocalchatError logged with a traceback (`log.exception`) into one line, in every handler.

    Its message already says what happened and what to do; the traceback only makes a log that users
    send us in bug reports longer. Installed once per process, at the CLI's start.
    """
    previous = logging.getLogRecordFactory()
    if getattr(previous, "folds_user_errors", False):
        return

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, LocalchatError):
            record.msg, record.args = f"{record.getMessage()}: {error} ({type(error).__name__})", ()
            record.exc_info, record.exc_text = None, None
        return record

    make.folds_user_errors = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make)
