"""localchat: a local-first LLM chat that runs the best model your machine can hold."""

__version__ = "0.1.0"
