"""The API protocols, each a translator between its wire format and the neutral request (api/service.py)."""
