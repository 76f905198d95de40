"""Attached documents without Gradio: the upload route's limits, safe copies, and reading them before the question."""
