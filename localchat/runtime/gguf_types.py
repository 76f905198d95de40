"""The GGUF file format's constants: the magic, ggml's tensor types, llama.cpp's file types, metadata value types.

They live at the runtime's level, the lowest that knows llama.cpp, so the worker (which loads GGUF
files) and models/ (which reads their headers) share one copy; this module imports nothing.
"""

from __future__ import annotations

GGUF_MAGIC = b"GGUF"

# ggml type id -> (name, elements per block, bytes per block); mirrors ggml's type traits.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}
GGML_TYPE_ID: dict[str, int] = {name: type_id for type_id, (name, _, _) in GGML_TYPES.items()}
GGML_TYPE_NAMES: dict[int, str] = {type_id: name.lower() for type_id, (name, _, _) in GGML_TYPES.items()}
GGML_TYPE_Q8_0 = GGML_TYPE_ID["Q8_0"]
GGML_TYPE_BF16 = GGML_TYPE_ID["BF16"]

# llama_ftype (general.file_type) -> the quant name used in file names.
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M",
    30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE",
}
FILE_TYPE_ID: dict[str, int] = {name: file_type for file_type, name in FILE_TYPES.items()}

# GGUF metadata value types: id -> struct format of a scalar; strings and arrays are read apart.
GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
GGUF_INT32 = 5
GGUF_STRING = 8
GGUF_ARRAY = 9


def pooling_key(arch: str) -> str:
    """The metadata key by which an embedding model's GGUF says how it pools its vectors: a model that
    writes text has none."""
    return f"{arch}.pooling_type"
