"""MCP servers the model may use: the user's `mcp.json` (servers.py), one supervised connection per server on
a background event loop (connection.py, loop.py), and a tool's result as bounded model input (results.py)."""
