"""The window's own CSS and script: what Gradio's components do not do themselves."""

from __future__ import annotations

from .page_messages import MESSAGE_CSS, MESSAGE_SCRIPT
from .page_tools import TOOLS_CSS, TOOLS_SCRIPT

CSS = """
#chat { flex-grow: 1; }
/* Quiet text that still reads: the theme's subdued grey is 2.4:1 on white, under AA's 4.5:1 for text this small. */
:root { --lc-quiet-text: var(--neutral-600); }
.dark { --lc-quiet-text: var(--neutral-300); }
#meter, #reading { font-size: 0.9em; margin-top: 0.3em; color: var(--lc-quiet-text); }
/* Gradio's progress timer ("processing | 0.1/11.9s") drew over the line of the attached files and the reading line
   while a file was read: those lines say what is happening in words, and the timer read as part of them. */
#attachments [data-testid="status-tracker"], #reading [data-testid="status-tracker"] { display: none !important; }
footer { display: none !important; }
/* Toasts open below the drawers' toggles (at the window's top edges, 16 to 48 px down), never over them: the
   settings drawer stays one click away while a toast shows. Gradio puts the first toast at this plus 12 px. */
.toast-wrap { --toast-top: 48px !important; }
.lc-hidden { display: none !important; }
#theme-toggle { max-width: 9em; }
#conversations { max-height: 45vh; overflow-y: auto; }  /* a long list keeps the model and status in reach */
/* "No chat matches": the search sets it each time; a list that other events fill again (New chat, an answer's
   title) shows chats, and the line never sits over them. */
.sidebar:has(#conversations label) #search-empty { display: none !important; }
#search-empty { color: var(--body-text-color-subdued); padding: 0 0.5em; }
#attach { padding: 0 0.6em; }
/* A single-choice dropdown's text stops before its arrow, a long name cut with "…": Gradio lays the arrow over
   the input's right end, and a model file's name ran under it. */
.secondary-wrap:has(> .icon-wrap) > input { padding-right: 2rem; text-overflow: ellipsis; }
.lc-chips { display: flex; flex-wrap: wrap; gap: 0.4em; }
.lc-chip { display: inline-flex; align-items: center; gap: 0.4em; max-width: 100%; padding: 0.15em 0.3em 0.15em 0.7em;
  border: 1px solid var(--border-color-primary); border-radius: 999px; background: var(--background-fill-secondary);
  font-size: 0.9em; }
.lc-chip-name { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; max-width: 22em; }
.lc-chip-tokens { color: var(--lc-quiet-text); white-space: nowrap; }
.lc-chip-remove { border: none; background: none; cursor: pointer; font-size: 1.1em; line-height: 1; padding: 0 0.3em;
  color: var(--lc-quiet-text); }
.lc-chip-remove:hover { color: var(--body-text-color); }
/* The chat's "localchat" label takes a row of its own above the messages, its trash icon beside it: Gradio floats
   both over the scrolling messages, so they sat on the chat's first line and on whatever scrolled under them. */
#chat > .wrapper > label[data-testid="block-label"] { position: static; margin: var(--block-label-margin); flex: none; }
/* A message being edited gets the width a message may have and a few lines, growing with its text: Gradio sizes
   the edit box to the message it replaces (at least 160 px), so a short question wrapped every word or two. */
#chat .message-row:has(textarea.edit-textarea) { width: calc(100% - var(--spacing-xl) * 6); }
#chat .message-row:has(textarea.edit-textarea) > .flex-wrap { flex: 1; }
#chat textarea.edit-textarea { width: 100% !important; min-height: 4lh !important; field-sizing: content;
  max-height: 50vh; padding: 0.5em 0.7em; }
/* A message sent while the answer streams: faded until its turn comes, its Cancel a small button; nothing
   of it is stored yet to copy or edit, so its message buttons are hidden. */
#chat .message-row:has(a[href^="#lc-cancel-"]) { opacity: 0.7; }
#chat .message-row:has(a[href^="#lc-cancel-"]) + .message-buttons { display: none; }
#chat a[href^="#lc-cancel-"] { text-decoration: none; padding: 0.05em 0.6em; border-radius: 999px;
  border: 1px solid var(--border-color-primary); background: var(--background-fill-primary); font-style: normal; }
/* A cited passage under a reply: its place, which opens to the text the reply was given. */
#chat details.passage { margin: 0.2em 0; font-size: 0.9em; }
#chat details.passage summary { cursor: pointer; color: var(--lc-quiet-text); }
#chat .passage-text { border-left: 3px solid var(--border-color-primary); padding: 0.3em 0.8em; margin: 0.3em 0;
  max-height: 16em; overflow-y: auto; white-space: normal; }
/* A thinking model's thinking above its answer: subdued, open while it streams, then one line to open. */
#chat details.thinking { margin: 0 0 0.6em; font-size: 0.9em; color: var(--body-text-color-subdued); }
#chat details.thinking summary { cursor: pointer; }
#chat .thinking-text { border-left: 3px solid var(--border-color-primary); padding: 0.3em 0.8em; margin: 0.3em 0;
  max-height: 24em; overflow-y: auto; white-space: normal; }
/* The chat's "↓" (back to the latest message) stays inside the chat: Gradio lifts it over everything, so it
   floated over an opened sidebar or settings drawer (z-index 1000). */
#chat .scroll-down-button-container { z-index: 2; }
/* The wizard's progress above the chat: its steps in a row (wrapping on a phone), the step under way marked, its
   latest lines and the whole log in the chat's width, in a monospace that keeps its tables' columns. */
.lc-tune-progress { border: 1px solid var(--border-color-primary); border-radius: var(--radius-lg);
  padding: 0.6em 0.9em; background: var(--background-fill-secondary); }
.lc-tune-time { color: var(--body-text-color-subdued); margin-left: 0.4em; white-space: nowrap; }
#tune-hide { align-self: flex-end; width: auto; max-width: 18em; }
.lc-tune-steps { display: flex; flex-wrap: wrap; gap: 0.3em 1.2em; list-style: none; padding: 0; margin: 0.5em 0; }
.lc-tune-steps li { white-space: nowrap; color: var(--body-text-color-subdued); }
.lc-tune-steps li.lc-tune-done, .lc-tune-steps li.lc-tune-now { color: var(--body-text-color); }
.lc-tune-steps li.lc-tune-now { font-weight: 600; }
.lc-tune-steps li.lc-tune-ended span { color: var(--error-text-color, #c00); }
.lc-tune-progress pre { font-size: 0.85em; white-space: pre-wrap; margin: 0.3em 0; max-height: 20em; overflow-y: auto; }
.lc-tune-log summary { cursor: pointer; color: var(--body-text-color-subdued); }
/* A confirmation opens beside what asked for it (the page script sets where), above the sidebar and the chat, on
   any screen: inside the sidebar it opened off screen whenever the sidebar was closed (a phone). */
#delete-confirm, #model-delete-confirm, #lc-ask-message { position: fixed; z-index: 1100; top: var(--lc-ask-top, 30vh);
  left: var(--lc-ask-left, 8px);
  width: min(20rem, calc(100vw - 16px)); padding: 0.8em; border: 1px solid var(--border-color-primary);
  border-radius: var(--radius-lg); background: var(--background-fill-primary); box-shadow: var(--shadow-drop-lg); }
/* What cannot be undone looks it: red, with white text (6.5:1), never the grey of "Keep it". */
#delete-yes, #model-delete-yes, #lc-ask-message .lc-ask-yes { background: #b91c1c !important;
  border-color: #991b1b !important; color: #fff !important; }
#delete-yes:hover, #model-delete-yes:hover, #lc-ask-message .lc-ask-yes:hover { background: #991b1b !important; }
#delete, #delete-preset { color: #b91c1c !important; }
.dark #delete, .dark #delete-preset { color: #fca5a5 !important; }
/* Files dragged over the window: where they go. */
#lc-drop-zone { position: fixed; inset: 0.5rem; z-index: 1200; display: none; align-items: center;
  justify-content: center; border: 3px dashed var(--color-accent); border-radius: var(--radius-xl);
  background: color-mix(in srgb, var(--background-fill-primary) 85%, transparent); pointer-events: none;
  font-size: 1.3em; font-weight: 600; color: var(--body-text-color); text-align: center; padding: 1em; }
#lc-drop-zone.lc-shown { display: flex; }
.lc-refusal { margin: 0.4em 0; padding: 0.4em 0.7em; border-left: 3px solid #b91c1c; color: #b91c1c; }
.dark .lc-refusal { color: #fca5a5; border-color: #fca5a5; }
.lc-refusal-fix { display: block; margin-top: 0.4em; padding: var(--button-small-padding); cursor: pointer;
  border: 1px solid currentColor; border-radius: var(--button-small-radius); background: none; color: inherit;
  font: inherit; font-weight: 600; }
.lc-clamped { font-size: 0.85em; color: var(--lc-quiet-text); margin: 0.2em 0; }
/* A phone: the message box takes the composer's first row whole, its placeholder on one line, and Attach, Send
   and Stop share the row under it; the chat takes the height. */
@media (max-width: 600px) {
  #composer { flex-wrap: wrap; gap: 0.4em; }
  #composer > .form:has(#message) { order: -1; flex: 1 1 100% !important; min-width: 100% !important; }
  #send, #stop, #attach { flex: 1 1 0 !important; min-width: 3.5em !important; padding: 0.4em; font-size: 0.9em; }
  #chat { height: 60vh !important; }
  /* The answer buttons three to a row: one to a row pushed Settings below the fold. */
  #answer-buttons { flex-wrap: wrap; gap: 0.3em; }
  #answer-buttons > button { flex: 1 1 30% !important; min-width: 0 !important; font-size: 0.8em; }
}
""" + MESSAGE_CSS + TOOLS_CSS

# Gradio's copy button copies what the chat shows: the answer with its "Included:" line and its
# numbers, with model HTML escaped. The page keeps each message's own text (#sources, JSON, one
# entry per message in order) and this copies that instead.
SCRIPT = r"""
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

// Requests that carry a value go to the server through one hidden button, whose event reads
// window.localchatAction: "remove:I" (a chip's ×), "branch:I:STEP" and "version:I:STEP" (a message's ‹ or ›),
// "delete-turn:I" and "delete-version:I" (a message's Delete, once confirmed), "cancel:N" (a waiting message's
// Cancel).
function localchatAct(request) {
  window.localchatAction = request;
  document.querySelector("#action-go")?.click();
}
// A model file's Load and Delete (the Models panel) go through the panel's own hidden button, with the row's path.
document.addEventListener("click", (event) => {
  const button = event.target.closest?.("#local-models .lc-file-load, #local-models .lc-file-delete");
  if (!button || button.disabled) return;
  const verb = button.classList.contains("lc-file-load") ? "load" : "delete";
  window.localchatModelAction = `${verb}:${button.dataset.path}`;
  document.querySelector("#model-action-go")?.click();
});
document.addEventListener("click", (event) => {
  const target = event.target.closest ? event.target : event.target.parentElement;
  const arrow = target?.closest("#chat button.lc-step");
  const remove = target?.closest("#chat button.lc-delete-message");
  const chip = target?.closest("#attachments .lc-chip-remove");
  const cancel = target?.closest("#chat a[href^='#lc-cancel-']");
  const leave = target?.closest("#refusal #leave-out");
  if (!arrow && !remove && !chip && !cancel && !leave) return;
  event.preventDefault();
  event.stopPropagation();
  if (chip) return localchatAct(`remove:${chip.dataset.index}`);
  if (cancel) return localchatAct(`cancel:${cancel.getAttribute("href").slice("#lc-cancel-".length)}`);
  if (remove) return localchatAskDelete(remove);
  if (leave) return localchatLeaveOut(leave);
  if (arrow.disabled) return;
  window.localchatRefocus = arrow.value;  // the chat is drawn anew: the arrow keeps the keyboard's focus
  localchatAct(arrow.value);
}, true);

// The edit box of a user message starts with what the chat shows: the notes under the message
// (its documents, its controls: branches ‹ 1/2 › and Delete) are not part of it, so they leave the box (the
// server drops them too).
const LC_NOTE = /\n\n(\*Attached: .*\*|<span class="lc-tools">.*<\/span>)$/;
document.addEventListener("click", (event) => {
  if (!event.target.closest || !event.target.closest("#chat button[aria-label='Edit']")) return;
  let frames = 0;
  const clean = () => {
    const box = document.querySelector("#chat textarea.edit-textarea");
    if (!box || !box.value) return void (frames++ < 120 && requestAnimationFrame(clean));
    let text = box.value;
    while (LC_NOTE.test(text)) text = text.replace(LC_NOTE, "");
    if (text !== box.value) {
      box.value = text;
      box.dispatchEvent(new Event("input", { bubbles: true }));
    }
  };
  requestAnimationFrame(clean);
}, true);  // capture: the chat's own handler may stop the click

// The Settings button opens and closes the settings drawer (Gradio's own toggle sits at its edge).
function localchatToggleSettings() {
  document.querySelector("#settings-panel .toggle-button")?.click();
}

// A chat opened (New chat, the list): the message box is emptied here, at the click, its text kept as the
// draft of the chat left; the opened chat's draft comes back only into a box still empty, so what is typed
// while the server opens the chat is never overwritten (its reply used to write the box after the typing).
function localchatSetMessage(text) {
  const box = document.querySelector("#message textarea");
  if (!box) return;
  box.value = text;
  box.dispatchEvent(new Event("input", { bubbles: true }));
}
function localchatTakeDraft() {
  const draft = document.querySelector("#message textarea")?.value || "";
  if (draft) localchatSetMessage("");
  return draft;
}
function localchatRestoreDraft(draft) {
  if (draft && !document.querySelector("#message textarea")?.value) localchatSetMessage(draft);
}

// Files dropped anywhere in the window are attached as if chosen with the attach button, and while files are
// dragged over it the window shows that it takes them (elsewhere Chromium would open the file and leave the app).
// The Models panel's importer takes its own drops.
const LC_OWN_DROPS = "#import-gguf";
function localchatDropZone(shown) {
  let zone = document.getElementById("lc-drop-zone");
  if (!zone && shown) {
    zone = document.createElement("div");
    zone.id = "lc-drop-zone";
    zone.textContent = "Drop files here to attach them to your message";
    document.body.appendChild(zone);
  }
  zone?.classList.toggle("lc-shown", shown);
}
function localchatDragsFiles(event) {
  return [...(event.dataTransfer?.types || [])].includes("Files") && !event.target.closest?.(LC_OWN_DROPS);
}
document.addEventListener("dragover", (event) => {
  if (!localchatDragsFiles(event)) return localchatDropZone(false);
  event.preventDefault();
  localchatDropZone(true);
});
document.addEventListener("dragleave", (event) => { if (!event.relatedTarget) localchatDropZone(false); });
document.addEventListener("drop", (event) => {
  localchatDropZone(false);
  if (!localchatDragsFiles(event) || !event.dataTransfer.files.length) return;
  event.preventDefault();
  const input = document.querySelector("#attach input[type=file]")
    || document.querySelector("#attach")?.parentElement?.querySelector("input[type=file]");
  if (!input) return;
  input.files = event.dataTransfer.files;
  input.dispatchEvent(new Event("change", { bubbles: true }));
});

// Files of a kind localchat does not read are left out of an attach (picked or dropped) with one line saying so
// under the message box: Gradio's own refusal listed all of its ~120 extensions. So for the chat import, which
// takes JSON only (Gradio said a bare "Invalid file type" to a Markdown export).
document.addEventListener("change", (event) => {
  const input = event.target;
  const place = input.closest?.("#composer") ? "composer" : input.closest?.("#transfer") ? "transfer" : null;
  if (!input.matches?.("input[type=file]") || !place || !input.accept) return;
  const accepted = input.accept.split(",").map((x) => x.trim().toLowerCase());
  const files = [...input.files], kept = files.filter((f) => accepted.some((x) => f.name.toLowerCase().endsWith(x)));
  const noteId = place === "composer" ? "lc-file-note" : "lc-import-note";
  let note = document.getElementById(noteId);
  note?.remove();
  if (kept.length === files.length) return;
  note = document.createElement("div");
  note.id = noteId;
  note.className = "lc-refusal";
  note.setAttribute("role", "alert");
  const left = files.filter((f) => !kept.includes(f)).map((f) => f.name).join(", ");
  note.textContent = place === "composer"
    ? `Not attached: ${left}. localchat reads PDF, Word (DOCX), text, Markdown, HTML and source `
      + "files; save it as one of those, or paste its text."
    : `Not imported: ${left}. Import takes chats exported as JSON (Export's JSON or All chats); a Markdown `
      + "export is for reading, not for importing back.";
  document.getElementById(place === "composer" ? "composer" : "import")?.after(note);
  const chosen = new DataTransfer();
  kept.forEach((f) => chosen.items.add(f));
  input.files = chosen.files;
  if (!kept.length) event.stopImmediatePropagation();
}, true);

// A confirmation opens beside what asked for it (the sidebar's Delete, the chat's trash icon, a model file's
// Delete), kept on screen.
document.addEventListener("click", (event) => {
  const asker = event.target.closest?.("#delete, #chat button[aria-label='Clear'], #local-models .lc-file-delete, "
                                       + "#chat button.lc-delete-message");
  if (!asker) return;
  const box = asker.getBoundingClientRect(), root = document.documentElement.style;
  root.setProperty("--lc-ask-top", `${Math.round(Math.max(8, Math.min(box.bottom + 6, innerHeight - 160)))}px`);
  root.setProperty("--lc-ask-left", `${Math.round(Math.max(8, Math.min(box.right - 320, innerWidth - 328)))}px`);
}, true);

// A number typed out of a slider's range is brought into it, saying so in the window's words (Gradio would
// refuse it with "Value 5 is greater than maximum value 2." and a traceback in the log).
function localchatClamp(input) {
  const low = parseFloat(input.min), high = parseFloat(input.max), value = parseFloat(input.value);
  const block = input.closest(".block");
  let note = block?.querySelector(".lc-clamped");
  if (Number.isNaN(value) || (value >= low && value <= high)) return;
  const clamped = Math.min(Math.max(value, low), high);
  input.value = String(clamped);
  input.dispatchEvent(new Event("input", { bubbles: true }));
  const name = (block?.querySelector("[data-testid=block-info]")?.textContent || "This setting")
    .replace(/\s*\(.*\)\s*$/, "");
  if (!note && block) {
    note = document.createElement("div");
    note.className = "lc-clamped";
    note.setAttribute("role", "status");
    block.querySelector(".head")?.after(note);
  }
  if (note) note.textContent = `${name} goes from ${low} to ${high}, so ${value} was set to ${clamped}.`;
}
document.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && event.target.matches?.("input[type=number][max]")) localchatClamp(event.target);
}, true);
for (const kind of ["change", "blur"]) {
  document.addEventListener(kind, (event) => {
    if (event.target.matches?.("input[type=number][max]")) localchatClamp(event.target);
  }, true);
}
document.addEventListener("input", (event) => {  // the user types again: the note has said its piece
  if (event.isTrusted && event.target.matches?.("input[type=number][max]")) {
    event.target.closest(".block")?.querySelector(".lc-clamped")?.remove();
  }
}, true);

// The chat list is one Tab stop (the chat open, or the first), and the arrow keys move through it: Gradio makes
// each chat a radio group of its own, so 29 chats took 29 Tab presses on the way to the message box.
function localchatRoveChats() {
  const radios = [...document.querySelectorAll("#conversations input[type=radio]")];
  const current = radios.find((r) => r.checked) || radios[0];
  for (const radio of radios) radio.tabIndex = radio === current ? 0 : -1;
}
new MutationObserver(() => requestAnimationFrame(localchatRoveChats))
  .observe(document.documentElement, { childList: true, subtree: true });
document.addEventListener("keydown", (event) => {
  const radio = event.target.closest?.("#conversations input[type=radio]");
  const step = { ArrowDown: 1, ArrowRight: 1, ArrowUp: -1, ArrowLeft: -1 }[event.key];
  if (!radio || !step) return;
  event.preventDefault();
  const radios = [...document.querySelectorAll("#conversations input[type=radio]")];
  const next = radios[(radios.indexOf(radio) + step + radios.length) % radios.length];
  next.focus();
  next.click();
}, true);

// On a phone the sidebar and the settings drawer cover the chat: picking a chat or starting one closes the
// sidebar, and a tap outside an open drawer closes it.
const LC_NARROW_PX = 800;
function localchatCloseDrawers(except) {
  if (innerWidth >= LC_NARROW_PX) return;
  for (const drawer of document.querySelectorAll(".sidebar.open")) {
    if (drawer !== except) drawer.querySelector(".toggle-button")?.click();
  }
}
document.addEventListener("click", (event) => {
  const target = event.target;
  if (!target.closest || innerWidth >= LC_NARROW_PX) return;
  if (target.closest("#conversations label, #new-chat")) return setTimeout(() => localchatCloseDrawers(null), 0);
  if (target.closest(".sidebar, #open-settings, #delete-confirm, #model-delete-confirm, #lc-ask-message, .toast-wrap")) {
    return;
  }
  localchatCloseDrawers(null);
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
""" + MESSAGE_SCRIPT + TOOLS_SCRIPT + """</script>
"""
