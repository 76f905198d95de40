"""The page's CSS and script for MCP tools: a call's card in an answer, its approval buttons (a click goes to the
Tools panel's hidden button with the call's id and the choice), and the Tools panel's server list."""

TOOLS_CSS = """
#chat details.lc-call { margin: 0.4em 0; padding: 0.3em 0.6em; border: 1px solid var(--border-color-primary);
  border-radius: var(--radius-md); font-size: 0.92em; }
#chat details.lc-call summary { cursor: pointer; font-weight: 600; overflow-wrap: anywhere; }
#chat details.lc-call-failed summary, #chat details.lc-call-denied summary { color: #b91c1c; }
.dark #chat details.lc-call-failed summary, .dark #chat details.lc-call-denied summary { color: #fca5a5; }
#chat .lc-call-label { margin-top: 0.4em; font-size: 0.85em; opacity: 0.75; }
#chat .lc-call-text { font-family: var(--font-mono); font-size: 0.9em; white-space: pre-wrap; overflow-wrap: anywhere;
  max-height: 16em; overflow-y: auto; }
#chat .lc-approval { display: flex; flex-wrap: wrap; gap: 0.5em; margin: 0.3em 0 0.6em; }
#chat .lc-approval button { padding: var(--button-small-padding); border-radius: var(--button-small-radius);
  border: 1px solid var(--button-secondary-border-color); background: var(--button-secondary-background-fill);
  color: var(--button-secondary-text-color); font-size: var(--button-small-text-size); cursor: pointer; }
#chat .lc-approval button.lc-approve-once { background: var(--button-primary-background-fill);
  color: var(--button-primary-text-color); border-color: var(--button-primary-border-color); }
#chat .lc-approval button:disabled { opacity: 0.5; cursor: default; }
#mcp-servers .lc-mcp-servers { list-style: none; padding: 0; margin: 0; }
#mcp-servers .lc-mcp-server { padding: 0.4em 0; border-bottom: 1px solid var(--border-color-primary); }
#mcp-servers .lc-mcp-off { opacity: 0.6; }
#mcp-servers .lc-mcp-where { font-family: var(--font-mono); font-size: 0.85em; overflow-wrap: anywhere; }
#mcp-servers .lc-mcp-notes, #mcp-servers .lc-mcp-transport { font-size: 0.85em; opacity: 0.8; }
"""

TOOLS_SCRIPT = r"""
// A call's Allow once / Always for this tool / Deny: answered once (its buttons go off), by the Tools panel.
document.addEventListener("click", (event) => {
  const button = event.target.closest?.("#chat button.lc-approve");
  if (!button || button.disabled) return;
  for (const other of button.parentElement.querySelectorAll("button")) other.disabled = true;
  window.localchatToolApproval = button.value;
  document.querySelector("#tool-approval-go")?.click();
});
"""
