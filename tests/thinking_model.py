"""SmolLM2 made a thinking model for the tests: its GGUF copied with another chat template
(tests/data/templates/smollm2-thinking.jinja: the prompt opens the <think> block, as Qwen3-2507-Thinking's
and DeepSeek-R1's do), and a grammar that steers it to think and then answer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "data" / "templates" / "smollm2-thinking.jinja"
THOUGHT = 'thought ::= [A-Z] [a-z ,]{12,60} "."\n'
# A thought, the close, an answer: greedy SmolLM2 under it writes a sentence of each.
ANSWER = 'root ::= thought "\\n</think>\\n\\n" [A-Z] [a-z ,]{6,40} "."\n' + THOUGHT


def thinking_copy(model_path: Path, folder: Path, template: Path = TEMPLATE) -> Path:
    """The copy (with `template`), made with the gguf package's own tool (as a user would)."""
    copy = folder / "smollm2-thinking.gguf"
    tool = Path(sys.executable).with_name("gguf-new-metadata")
    subprocess.run([str(tool), "--chat-template-file", str(template), str(model_path), str(copy)], check=True,
                   capture_output=True)
    return copy
