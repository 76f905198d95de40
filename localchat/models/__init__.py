"""Model catalog, GGUF facts, planning and downloads."""
