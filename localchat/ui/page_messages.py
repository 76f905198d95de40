"""The page's CSS and script for the controls under a message (ui/chat/shown.py draws them): the "‹ 2/3 ›" of an
answer's versions and of a turn's branches, a message's Delete and its confirmation, and a refusal's Leave out.
page.py puts them into the page with the rest; its `localchatAct` sends their requests."""

from __future__ import annotations

MESSAGE_CSS = """
/* A bubble's text starts on its own side: the right for a right-to-left message (Gradio aligns every one left). */
#chat .message-content { text-align: start; }
/* The controls under a message: "‹ 2/3 ›" (an answer's versions, a turn's branches: one look) and its Delete. */
#chat .lc-tools { display: inline-flex; flex-wrap: wrap; align-items: center; gap: 0.6em; font-size: 0.9em;
  color: var(--lc-quiet-text); }
#chat .lc-stepper { display: inline-flex; align-items: center; gap: 0.1em; white-space: nowrap; }
#chat .lc-tools button { min-width: 1.9em; min-height: 1.9em; padding: 0 0.35em; border: 1px solid transparent;
  border-radius: var(--radius-sm); background: none; color: inherit; font: inherit; line-height: 1; cursor: pointer; }
#chat .lc-tools button.lc-step { font-size: 1.25em; }
#chat .lc-tools button:hover:not(:disabled) { border-color: var(--border-color-primary); color: var(--body-text-color); }
#chat .lc-tools button:focus-visible { outline: 2px solid var(--color-accent); outline-offset: 1px; }
#chat .lc-tools button:disabled { opacity: 0.35; cursor: default; }
#chat .lc-tools button.lc-delete-message:hover { color: #b91c1c; }
.dark #chat .lc-tools button.lc-delete-message:hover { color: #fca5a5; }
/* A message's Delete asks in a box of the page script's own, made to look like the chat's. */
#lc-ask-message p { margin: 0 0 0.7em; color: var(--body-text-color); }
#lc-ask-message .lc-ask-buttons { display: flex; gap: 0.5em; }
#lc-ask-message button { flex: 1; padding: var(--button-small-padding); border-radius: var(--button-small-radius);
  border: 1px solid var(--button-secondary-border-color); background: var(--button-secondary-background-fill);
  color: var(--button-secondary-text-color); font-weight: var(--button-small-text-weight);
  font-size: var(--button-small-text-size); cursor: pointer; }
"""

MESSAGE_SCRIPT = r"""
new MutationObserver(() => {
  // A message in a right-to-left script (Arabic, Hebrew, Persian) reads from the right: each bubble's text takes
  // its direction from itself (Gradio sets dir="ltr" on every bubble).
  for (const text of document.querySelectorAll("#chat .message-content:not([dir])")) text.setAttribute("dir", "auto");
  // The chat's sanitizer keeps a button's title but no aria-label: the title names it for a screen reader too.
  for (const button of document.querySelectorAll("#chat .lc-tools button[title]:not([aria-label])")) {
    button.setAttribute("aria-label", button.title);
  }
  const step = window.localchatRefocus;
  const arrow = step && document.querySelector(`#chat button.lc-step[value="${step}"]`);
  if (!arrow || document.activeElement === arrow) return;
  window.localchatRefocus = null;
  if (!arrow.disabled) arrow.focus();
  else arrow.closest(".lc-stepper")?.querySelector("button.lc-step:not(:disabled)")?.focus();
}).observe(document.documentElement, { childList: true, subtree: true });

// A refusal's Leave out: once the server has let the earlier documents go (the refusal leaves), the message
// still in the box is sent again.
function localchatLeaveOut(button) {
  button.disabled = true;
  localchatAct("unpin");
  let frames = 0;
  const send = () => {
    if (document.querySelector("#refusal #leave-out")) return void (frames++ < 1800 && requestAnimationFrame(send));
    document.querySelector("#send")?.click();
  };
  requestAnimationFrame(send);
}

// A message's Delete asks beside itself (red Delete, Keep it), as the chat's Delete does; Esc or a click
// elsewhere keeps the message.
function localchatAskDelete(asker) {
  document.getElementById("lc-ask-message")?.remove();
  const box = document.createElement("div");
  box.id = "lc-ask-message";
  box.setAttribute("role", "alertdialog");
  box.setAttribute("aria-modal", "false");
  const what = asker.value.startsWith("delete-version") ? "this version of the answer"
    : "this message and its answer";
  box.innerHTML = `<p></p><div class="lc-ask-buttons"><button type="button" class="lc-ask-yes">Delete</button>`
    + `<button type="button" class="lc-ask-no">Keep it</button></div>`;
  box.querySelector("p").textContent = `Delete ${what} for good? This cannot be undone.`;
  box.setAttribute("aria-label", `Delete ${what}?`);
  const close = () => { box.remove(); asker.isConnected && asker.focus(); };
  box.querySelector(".lc-ask-yes").addEventListener("click", () => { box.remove(); localchatAct(asker.value); });
  box.querySelector(".lc-ask-no").addEventListener("click", close);
  box.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    event.stopPropagation();  // Esc here keeps the message; it does not stop the answer
    close();
  });
  document.body.appendChild(box);
  box.querySelector(".lc-ask-no").focus();
}
document.addEventListener("click", (event) => {
  const box = document.getElementById("lc-ask-message");
  if (box && !event.target.closest?.("#lc-ask-message, #chat button.lc-delete-message")) box.remove();
});
"""
