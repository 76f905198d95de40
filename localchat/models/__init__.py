"""Models: the catalog (models.yaml, parsed once), GGUF headers, models already on this machine, downloads, derived files."""
