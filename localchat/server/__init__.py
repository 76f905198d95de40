"""HTTP front ends: the OpenAI-compatible API (api.py) and the apps that serve it."""

import os

# Local-first: the window reports nothing to anyone. Set before any module here imports gradio.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
