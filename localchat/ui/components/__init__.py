"""The window's Gradio components, in page order from layout.py; the only part of ui/ (with web.py) that imports Gradio."""
