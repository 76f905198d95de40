"""The window's own CSS and script: what Gradio's components do not do themselves."""

from __future__ import annotations

CSS = """
#chat { flex-grow: 1; }
#meter { font-size: 0.9em; }
footer { display: none !important; }
.lc-hidden { display: none !important; }
"""

# Gradio's copy button copies what the chat shows: the answer with its "Included:" line and its
# numbers, with model HTML escaped. The page keeps each message's own text (#sources, JSON, one
# entry per message in order) and this copies that instead.
SCRIPT = """
<script>
document.addEventListener("click", async (event) => {
  const button = event.target.closest("#chat button[aria-label='Copy message']");
  if (!button) return;
  event.stopPropagation();
  event.preventDefault();
  const buttons = [...document.querySelectorAll("#chat button[aria-label='Copy message']")];
  const field = document.querySelector("#sources textarea");
  let sources = [];
  try { sources = JSON.parse(field ? field.value : "[]"); } catch (e) { sources = []; }
  const text = sources[buttons.indexOf(button)];
  if (typeof text !== "string") return;
  await navigator.clipboard.writeText(text);
  button.setAttribute("title", "Copied");
  setTimeout(() => button.setAttribute("title", "Copy message"), 2000);
}, true);
</script>
"""
