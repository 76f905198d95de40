"""The window's own CSS and script: what Gradio's components do not do themselves."""

from __future__ import annotations

CSS = """
#chat { flex-grow: 1; }
#meter { font-size: 0.9em; }
footer { display: none !important; }
.lc-hidden { display: none !important; }
#theme-toggle { max-width: 9em; }
#conversations { max-height: 45vh; overflow-y: auto; }  /* a long list keeps the model and status in reach */
/* A phone: the composer stays one row (the box, then two small buttons) and the chat takes the height. */
@media (max-width: 600px) {
  #send, #stop { min-width: 3.5em !important; padding: 0 0.4em; }
  #chat { height: 60vh !important; }
}
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

// Esc stops the answer in progress; Ctrl+Shift+O (Cmd+Shift+O) starts a new chat.
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape") {
    document.querySelector("#stop")?.click();
  } else if ((event.ctrlKey || event.metaKey) && event.shiftKey && event.key.toLowerCase() === "o") {
    event.preventDefault();
    document.querySelector("#new-chat")?.click();
  }
});

// Files dropped anywhere on the chat are attached as if dropped on the attach box.
document.addEventListener("dragover", (event) => {
  if (event.target.closest && event.target.closest("#chat")) event.preventDefault();
});
document.addEventListener("drop", (event) => {
  if (!event.target.closest || !event.target.closest("#chat") || !event.dataTransfer?.files.length) return;
  event.preventDefault();
  const input = document.querySelector("#files input[type=file]");
  if (!input) return;
  input.files = event.dataTransfer.files;
  input.dispatchEvent(new Event("change", { bubbles: true }));
});

// Dark and light follow the OS until the user picks one with the toggle; the pick is remembered.
function localchatApplyTheme() {
  const picked = localStorage.getItem("localchat-theme");
  const dark = picked ? picked === "dark" : window.matchMedia("(prefers-color-scheme: dark)").matches;
  document.body.classList.toggle("dark", dark);
}
function localchatToggleTheme() {
  const dark = !document.body.classList.contains("dark");
  localStorage.setItem("localchat-theme", dark ? "dark" : "light");
  localchatApplyTheme();
}
window.addEventListener("DOMContentLoaded", localchatApplyTheme);
window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", localchatApplyTheme);
</script>
"""
