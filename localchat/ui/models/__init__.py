"""The Models panel's logic without Gradio: the catalog with what fits here, the local files, hub search results, imports."""
