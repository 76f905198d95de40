"""The KV store: which tokens each sequence slot holds (prefix reuse), prompt states kept on disk, and what a saved state may claim."""
