"""An answer with MCP tools on: the model's turns and its calls in a loop. Each turn's tools are offered the way
the API offers function tools (api/constraints.py makes the prompt and the grammar, api/reader.py reads the calls
out of the text); each call waits for the user's approval (tool_cards.py shows it), runs on its server, and its
result goes back to the model, for at most LIMITS.steps turns that call. ChatCore.answer reads it as it reads
any answer's stream: it yields the engine's events, and a ToolStep each time a card changes."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any, Iterator

from ...api.constraints import check_tools, constrain, grammar_of
from ...api.reader import reader_for
from ...api.thinking import after_thinking
from ...api.tool_parser import ToolCall
from ...errors import LocalchatError, ToolServerError
from ...mcp_host.hub import tool_servers
from ...mcp_host.limits import LIMITS
from ...runtime.engine import Request
from ...runtime.events import Done, Event, Failed
from ...runtime.sampling import SamplingParams
from ...runtime.templates.thinking import Thought
from . import tool_cards
from .chat_tools import ChatTools, Toolset
from .thinking_view import Budgeted, ThinkingView

POLL_S = 0.1  # how often a running call looks at whether the answer was stopped
DENIED = "The user denied this call of {tool}; it did not run. Go on without it, or ask the user."


@dataclass(slots=True)
class ToolStep:
    """A card changed (it asks, runs, or ended): the window draws the answer again at once."""

    note: str


class ToolView(ThinkingView):
    """An answer over several model turns: each turn's thinking and text, and the calls it made (`steps`), then
    the last turn's thinking and text as a ThinkingView has them."""

    def __init__(self, template_source: str, prompt: str, plan: Any, schemas: dict[str, Any]) -> None:
        super().__init__(template_source, prompt)
        self.fmt, self.schemas = plan.fmt, schemas
        self.reader = reader_for(self.style, prompt, plan.fmt, plan.names, schemas)
        self.steps: list[dict[str, Any]] = []
        self.notes: list[str] = []  # the chat's servers left out of this answer, and why
        self._ended = False

    def _keep(self, pieces: list[Any]) -> None:  # a call's pieces are read into calls, not shown as text
        super()._keep([p for p in pieces if isinstance(p, (str, Thought))])

    def end_turn(self, cut: bool) -> list[ToolCall]:
        """The model's turn is over: the calls it made."""
        if not self._ended:
            self._ended = True
            self._keep(self.reader.finish(cut) if self.reader is not None else [])
        return list(self.reader.calls) if self.reader is not None else []

    def next_turn(self, prompt: str, plan: Any, cards: list[dict[str, Any]]) -> None:
        """The turn that made `cards` joins the steps; the next one is read from `prompt`."""
        self.steps.append({"thinking": self.thought, "text": self.answer, "cards": cards})
        self.reader = reader_for(self.style, prompt, plan.fmt, plan.names, self.schemas)
        self.thought, self.answer, self.raw, self.seconds, self._ended = "", "", [], None, False
        self.started = time.perf_counter()

    def finish(self, cut: bool = False) -> None:
        self.end_turn(cut)  # the last turn's reader, finished once
        if self.thought and self.seconds is None:
            self.seconds = time.perf_counter() - self.started

    def saved(self) -> dict[str, Any]:
        steps = [step | {"cards": [dict(c) for c in step["cards"]]} for step in self.steps]
        return super().saved() | ({"tool_steps": steps} if steps else {}) \
            | ({"tool_notes": list(self.notes)} if self.notes else {})


class ToolRun:
    """One answer's loop; iterate it for the events, `cancel` (Stop) ends the turn or the call running."""

    def __init__(self, tools: ChatTools, conv_id: str, toolset: Toolset, engine: Any, messages: list[dict[str, Any]],
                 switches: dict[str, Any], params: SamplingParams, thinking_budget: int) -> None:
        self.tools, self.conv_id, self.toolset, self.engine = tools, conv_id, toolset, engine
        self.messages, self.switches, self.params, self.budget = list(messages), switches, params, thinking_budget
        self.functions = []
        for function in toolset.function_tools():  # a server's tool whose schema cannot be enforced is left out
            try:
                self.functions += check_tools([function])
            except LocalchatError as exc:
                toolset.notes.append(f"{function['function']['name']}: {exc}")
        self.schemas = {f["function"]["name"]: f["function"].get("parameters") or {} for f in self.functions}
        self.stopped = self.done = False
        self.current: Budgeted | None = None
        plan, self.prompt = self._plan(0)
        self.view = ToolView(engine.template.source, self.prompt, plan, self.schemas)
        self.first_plan = plan
        self.view.notes = toolset.notes  # kept with the answer: why a server's tools were not offered

    def _choice(self, turn: int) -> Any:
        if turn == 0 and self.toolset.forced:  # the tool the message picked: its call is forced by the grammar
            return {"type": "function", "function": {"name": self.toolset.forced}}
        # After the picked call, or the last turn that may call: the model answers with what it has.
        return "none" if self.toolset.forced or turn >= LIMITS.steps else "auto"

    def _plan(self, turn: int) -> tuple[Any, str]:
        plan = constrain(self.messages, self.engine.template.source, self.functions or None,
                         self._choice(turn) if self.functions else None, False, None)
        return plan, self.engine.template.render(plan.messages, tools=plan.tools, switches=self.switches)

    def __iter__(self) -> Iterator[Event | ToolStep]:
        try:
            yield from self._turns()
        finally:
            self.done = True

    def _turns(self) -> Iterator[Event | ToolStep]:
        plan, prompt, turn = self.first_plan, self.prompt, 0
        if self.toolset.notes:
            yield ToolStep("left out: " + "; ".join(self.toolset.notes))
        while True:
            params = dataclasses.replace(self.params, grammar=after_thinking(grammar_of(plan),
                                                                             self.view.style, prompt))
            self.current = Budgeted(self.engine.submit, Request(prompt=prompt, sampling=params), self.view,
                                    self.budget)
            finish = "stop"
            for event in self.current:
                if isinstance(event, Done):
                    finish = event.finish_reason  # held back: the answer may go on after the calls
                    continue
                yield event
                if isinstance(event, Failed):
                    return
            calls = self.view.end_turn(cut=finish == "length")
            if self.stopped or finish != "stop" or not calls:
                yield Done("cancelled" if self.stopped else finish)
                return
            cards: list[dict[str, Any]] = []
            text, thought = self.view.answer, self.view.thought
            results = yield from self._run_calls(calls, cards, plan)
            turn += 1
            self.messages += [{"role": "assistant", "content": text, "reasoning": thought, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in calls]}] + [{"role": "tool", "tool_call_id": c.id, "content": r} for c, r in zip(calls, results)]
            plan, prompt = self._plan(turn)
            self.view.next_turn(prompt, plan, cards)
            if self.stopped:
                yield Done("cancelled")
                return

    def _run_calls(self, calls: list[ToolCall], cards: list[dict[str, Any]], plan: Any) -> Iterator[Any]:
        """Each call asked, run and shown; returns what the model reads of each (a generator's return)."""
        results = []
        # The turn's cards show under its text while they are asked and run.
        self.view.steps.append({"thinking": self.view.thought, "text": self.view.answer, "cards": cards})
        self.view.answer, self.view.thought = "", ""
        try:
            for call in calls:
                results.append((yield from self._one(call, cards)))
        finally:
            step = self.view.steps.pop()  # next_turn keeps it for good, with the turn's text
            self.view.answer, self.view.thought = step["text"], step["thinking"]
        return results

    def _one(self, call: ToolCall, cards: list[dict[str, Any]]) -> Iterator[Any]:
        found = self.toolset.by_name.get(call.name)
        card = tool_cards.new_card(call.id, found[0].name if found else "?", call.name, call.arguments)
        cards.append(card)
        if self.stopped:
            card["state"] = "not run"
            return "The user stopped the answer before this call ran."
        if found is None:
            card |= {"state": "failed", "result": f"there is no tool named {call.name!r} in this chat"}
            return card["result"]
        spec = found[0]
        if call.name in spec.always_allow:
            card["approval"] = "trusted"
        else:
            yield ToolStep(f"{spec.name} · {call.name}: waiting for your approval")
            choice = self.tools.wait_for(self.conv_id, call.id, lambda: self.stopped)
            if choice in ("stopped", "deny"):
                card |= {"state": "stopped" if choice == "stopped" else "denied",
                         "approval": "denied" if choice == "deny" else ""}
                yield ToolStep(f"{call.name}: {card['state']}")
                return DENIED.format(tool=call.name)
            if choice == "always":
                self.tools.always_allow(spec, call.name)
            card["approval"] = choice
        try:
            arguments = json.loads(call.arguments or "{}")
        except (ValueError, RecursionError):
            arguments = None
        if not isinstance(arguments, dict):
            card |= {"state": "failed", "result": "the arguments were not a JSON object"}
            return card["result"] + "; call the tool again with an object."
        card["state"] = tool_cards.RUNNING
        yield ToolStep(f"{spec.name} · {call.name}: running")
        return (yield from self._running(card, spec, call.name, arguments))

    def _running(self, card: dict[str, Any], spec: Any, name: str, arguments: dict[str, Any]) -> Iterator[Any]:
        began = time.perf_counter()
        future = tool_servers().start_call(spec, name, arguments, LIMITS.call_seconds, LIMITS.result_chars)
        while True:
            try:
                outcome = future.result(POLL_S)
                card |= {"state": "failed" if outcome.is_error else "done", "result": outcome.text}
                break
            except TimeoutError:
                if self.stopped:
                    future.cancel()
                    card |= {"state": "stopped", "result": "stopped by the user"}
                    break
            except ToolServerError as exc:
                card |= {"state": "failed", "result": str(exc)}
                break
        card["seconds"] = round(time.perf_counter() - began, 2)
        yield ToolStep(f"{name}: {card['state']}")
        return card["result"]

    @property
    def finished(self) -> bool:
        return self.done

    def cancel(self) -> None:
        self.stopped = True
        if self.current is not None:
            self.current.cancel()


def tool_run(tools: ChatTools, conv: Any, engine: Any, messages: list[dict[str, Any]], switches: dict[str, Any],
             params: SamplingParams, thinking_budget: int) -> ToolRun | None:
    """The answer's loop when the chat has tools on (None: an answer as any other)."""
    if not tools.on(conv.settings):
        return None
    return ToolRun(tools, conv.id, tools.toolset(conv.id, conv.settings), engine, messages, switches, params,
                   thinking_budget)
