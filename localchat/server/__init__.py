"""HTTP front ends: the OpenAI-compatible API (api.py) and the apps that serve it."""
