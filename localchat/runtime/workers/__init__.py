"""What holds a model: llama.cpp's worker, the torch (GPTQ) worker, the embedder, the PD handover between two workers, llama.cpp's log and file constants."""
