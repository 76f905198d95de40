"""llama.cpp's backends in this process: the CPU kernels (`kernels`, `cpu_variants`, `cpu_proof`) and the GPUs (`devices`, `residence`)."""
