"""The chat's logic without Gradio: conversations and their store, versions and branches, the answer under way, presets, export and import, the text the window shows."""
