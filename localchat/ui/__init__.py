"""The chat window: Gradio components (components/) over logic that has no Gradio in it (chat/, documents/,
models/, wizard/), and the one local server that carries the window and the API (web.py)."""

import os

# Local-first: the window reports nothing to anyone. Set before any module here imports gradio.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
