"""The OpenAI-compatible API: its routes (routes.py), the services that answer them (a local engine or
another server), the wire formats, and the app `localchat serve` runs."""
