"""The chat window: a Gradio layout over chat logic that has no Gradio in it, conversations, uploads,
the wizard panel, and the one local server that carries the window and the API."""

import os

# Local-first: the window reports nothing to anyone. Set before any module here imports gradio.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
