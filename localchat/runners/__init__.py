"""Model runners: each loaded model's Engine in a child process of its own (`child.py`), started,
watched and restarted by the server's supervisor (`supervisor.py`), so that llama.cpp aborting or
spinning on a hostile model file, grammar or schema costs the requests in flight, never the server."""
