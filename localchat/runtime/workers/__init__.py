"""What holds a model: llama.cpp's worker, the torch (GPTQ) worker, the embedder, the PD handover between two workers, and a CPU variant's proof (a worker in a child)."""
