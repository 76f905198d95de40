"""The hardware wizard's logic without Gradio: `localchat tune` in a child process and its progress read from its lines."""
