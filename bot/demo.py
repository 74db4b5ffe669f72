"""``plangate demo``: the whole flow offline, in the terminal (README.md).

A console channel stands in for the chat, the scripted model for the LLM, and a temporary home
and workspace for the real ones. The engine, the plan files and the SQLite log are the real
ones, and the demo is a front end like any other: it drives the engine only through its API
(``engine.api``), hears it through the ``Channel`` port, and shows the cards as the
channel-neutral text every front end draws them from (bot.cardview), with the same buttons.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from bot.cardview import APPROVE, CardText, goal_card_text, markdown_to_text, plan_card_text
from bot.channels import ChannelQueue
from bot.compose import open_plangate
from engine.api import ApprovalView, EngineApi, Outcome, Press
from engine.app import EngineConfig
from engine.events import ApprovalDecision, TurnOutcome
from engine.keys import Chat, MessageKey, make_key
from engine.limits import ChannelLimits
from engine.model.script import ScriptStep, call, say
from engine.model.scripted import ScriptedProvider
from engine.model.types import ModelReply
from engine.text import clip

# The console's own keys (engine.keys): one person, one group chat.
OWNER = make_key("console", "you")
OWNER_NAME = "Ada"  # how the cards name the person at the console (never by an id)
DEMO_CHAT = Chat.group(make_key("console", "demo"))
DEMO_TIMEOUT_S = 50.0

PLAN_MD = """# Greeting module

## Context
- **Problem:** The project has no way to greet a user.
- **Target state:** `greet.hello(name)` returns "Hello, name!" and a test proves it.
- **Intent:** The team asked for a friendly greeting in the CLI.

## Implementation steps
1. Module — write greet.py with hello(name).
   - Done when: hello("Ada") returns "Hello, Ada!"
2. Test — write test_greet.py and run it with python3.
   - Done when: the test prints ok
"""

GREET_PY = 'def hello(name: str) -> str:\n    return f"Hello, {name}!"\n'
TEST_PY = 'import greet\n\nassert greet.hello("Ada") == "Hello, Ada!"\nprint("ok")\n'


def demo_script() -> list[ScriptStep]:
    """What the scripted model says, turn after turn: plan, execute, one goal round."""
    return [
        # Turn 1, planning (pre-init -> post-init Editing): explore, init, write, submit.
        call("list_files", {}, text="Let me look at the project first."),
        call("plan", {"op": "init", "title": "Greeting module", "mode": "design"}),
        call("write_file", {"path": "{plan_md}", "content": PLAN_MD}),
        call("plan", {"op": "submit"}),
        say("The plan is written: two steps, a module and its test. Approve it when ready."),
        # Turn 2, execution after Approve.
        call("plan", {"op": "start"}),
        call("write_file", {"path": "greet.py", "content": GREET_PY}),
        call("plan", {"op": "complete", "evidence": "greet.py defines hello(name)"}),
        call("plan", {"op": "start"}),
        call("write_file", {"path": "test_greet.py", "content": TEST_PY}),
        call("bash", {"command": "python3 test_greet.py"}),
        call("plan", {"op": "complete", "evidence": "python3 test_greet.py printed ok"}),
        say("Done: **greet.py** and its test are in place, and the test passes."),
        # Turn 3, one goal round: verify, then report the goal complete.
        call("bash", {"command": "python3 test_greet.py"}),
        call(
            "update_goal",
            {"status": "complete", "reason": "the test passes"},
            text="The goal is met: the greeting test passes.",
        ),
    ]


def tool_line(name: str, arguments: dict[str, Any]) -> str:
    """One short line for a tool call: ``🔧 bash: python3 test_greet.py``."""
    if name == "plan":
        shown = " ".join(str(arguments[k]) for k in ("op", "title", "task_id") if k in arguments)
    else:
        first = next((v for k, v in arguments.items() if k != "content"), "")
        # A path shows as its file name: the plan's .md lives deep in plangate's home.
        shown = Path(first).name if "path" in arguments and first == arguments["path"] else first
    return clip(f"🔧 {name}: {shown}" if shown else f"🔧 {name}", 90, one_line=True)


class ShowingTools:
    """The demo's model: the scripted one, each tool call it asks for shown in one line."""

    def __init__(self, inner: ScriptedProvider, show: Callable[[str], None]) -> None:
        self._inner, self._show = inner, show

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
    ) -> ModelReply:
        reply = await self._inner.complete(messages, tools, max_tokens=max_tokens)
        for asked in reply.tool_calls:
            self._show(tool_line(asked.name, asked.arguments))
        return reply


# Seconds after each printed line, so a person can follow; ``--fast`` (tests) sets 0.
PACE_S = 0.6
NEXT_STEPS = """That was the offline demo. To run plangate on your own project:
  1. plangate setup    # the bot token, pair your phone, the project folder, the model
  2. plangate doctor   # checks the token, the model, the folders and the sandbox
  3. plangate run      # then send /plan <what you want> to your bot"""


# A terminal takes any length; files are only named, never shown.
CONSOLE_LIMITS = ChannelLimits(message_chars=1_000_000)


class Console:
    """The terminal the demo prints to: one line per speaker, paced for a reader."""

    def __init__(self, out: TextIO, *, pace_s: float = 0.0) -> None:
        self._out = out
        self._pace_s = pace_s

    def line(self, who: str, text: str) -> None:
        prefix = f"{who:>9} │ "
        pad = " " * 10 + "│ "
        lines = text.splitlines() or [""]
        self._out.write(prefix + lines[0] + "\n")
        for rest in lines[1:]:
            self._out.write(pad + rest + "\n")
        self._out.flush()
        if self._pace_s:
            # The demo's engine waits with the reader: the whole loop pauses, on purpose.
            time.sleep(self._pace_s)


def card_lines(card: CardText) -> str:
    """A card as the terminal shows it: its text, then its buttons as ``[label]``."""
    labels = "  ".join(f"[{label}]" for label in card.labels())
    return card.plain() + (f"\n{labels}" if labels else "")


class ConsoleChannel:
    """An :class:`engine.ports.Channel` that prints the chat to a terminal; built on the
    engine's API (it draws the cards from ``plan_card``/``goal_card``) like any front end."""

    def __init__(self, console: Console, engine: EngineApi) -> None:
        self._console = console
        self._engine = engine
        self._last: dict[str, str] = {}
        self.limits = CONSOLE_LIMITS
        # Turns started and running: the demo waits for the agent through these, as a
        # person watching the chat would.
        self.started = 0
        self.running = 0
        self.changed = asyncio.Event()

    def line(self, who: str, text: str) -> None:
        self._console.line(who, text)

    async def reply(self, session_id: str, text: str, *, reply_to: MessageKey | None) -> None:
        self.line("plangate", markdown_to_text(text))

    async def ask(self, session_id: str, question: str, options: Sequence[str]) -> None:
        buttons = "  ".join(f"[{o}]" for o in options)
        self.line("plangate", f"❓ {question}" + (f"\n{buttons}" if buttons else ""))

    async def typing(self, session_id: str) -> None:
        return None

    async def turn_started(self, session_id: str) -> None:
        self.started += 1
        self.running += 1
        self.changed.set()

    async def turn_ended(self, session_id: str, outcome: TurnOutcome) -> None:
        if outcome != "completed":
            self.line("plangate", f"(turn ended: {outcome})")
        self.running -= 1
        self.changed.set()

    async def plan_changed(self, session_id: str) -> None:
        data = await self._engine.plan_card(session_id)
        self._card("plan card", plan_card_text(data, now=time.time()))

    async def goal_changed(self, session_id: str) -> None:
        data = await self._engine.goal_card(session_id)
        if data.goal is None and "goal card" not in self._last:
            return  # no goal and no goal card yet: nothing to show (as in a chat)
        self._card("goal card", goal_card_text(data))

    async def notice(self, session_id: str, text: str) -> None:
        self.line("plangate", f"ℹ️ {text}")

    async def send_file(
        self, session_id: str, data: bytes, filename: str, *, caption: str | None
    ) -> None:
        shown = f" — {caption}" if caption else ""
        self.line("plangate", f"📎 {filename} ({len(data)} bytes){shown}")

    async def drafts_wanted(self, session_id: str) -> bool:
        return False  # the console prints the final reply only

    async def draft(self, session_id: str, text: str, *, more: bool = False) -> None:
        return None

    async def approval_asked(self, session_id: str, view: ApprovalView) -> None:
        self.line("plangate", f"🔐 allow {view.tool}? {view.command}")

    async def approval_closed(
        self, session_id: str, view: ApprovalView, decision: ApprovalDecision
    ) -> None:
        self.line("plangate", f"🔐 {view.tool}: {decision}")

    def _card(self, who: str, card: CardText) -> None:
        shown = card_lines(card)
        if shown == self._last.get(who):
            return  # the card's text is unchanged: a chat's card would not be edited either
        self._last[who] = shown
        self.line(who, shown)

    async def settle(self, session_id: str, started_before: int) -> None:
        """Wait until a turn started after ``started_before`` turns, none is running and the
        agent has said all it had to (the card's ``busy`` is off: the reply comes after the
        turn's end)."""
        while self.started <= started_before or self.running:
            self.changed.clear()
            await self.changed.wait()
        while (await self._engine.plan_card(session_id)).busy:
            await asyncio.sleep(0.01)


def _show(channel: ConsoleChannel, outcome: Outcome) -> None:
    if outcome.reply:
        channel.line("plangate", outcome.reply)


async def run_demo(out: TextIO = sys.stdout, *, pace_s: float = 0.0) -> int:
    """Play the demo, ``pace_s`` seconds after each line; returns the process exit code (0
    when the plan completed)."""
    console = Console(out, pace_s=pace_s)
    with tempfile.TemporaryDirectory(prefix="plangate-demo-") as tmp:
        root = Path(tmp)
        workspace = root / "workspace"
        workspace.mkdir()
        (workspace / "README.md").write_text("# demo project\n", encoding="utf-8")
        # Inside the sandbox bash runs unasked; the rule lets the demo's one command run
        # where the policy asks for every command (PLANGATE_BASH_APPROVAL=always).
        config = EngineConfig(
            workspace=workspace, max_goal_rounds=3, allow_bash=(("python3", "test_greet.py"),)
        )
        # Built in one pass, as `plangate run` is (bot.channels): the engine's words wait in
        # the queue until the console, built on the engine, takes them.
        queue = ChannelQueue(CONSOLE_LIMITS)
        async with open_plangate(
            root / "home",
            model=ShowingTools(
                ScriptedProvider(demo_script()), functools.partial(console.line, "agent")
            ),
            channel=queue,
            config=config,
        ) as opened:
            engine = opened.engine
            channel = ConsoleChannel(console, engine)
            delivering = asyncio.ensure_future(queue.deliver(channel))
            await engine.start()
            try:
                # The pauses between lines are the reader's, not the engine's: not timed.
                code = await asyncio.wait_for(
                    _play(engine, channel, workspace), DEMO_TIMEOUT_S + 100 * pace_s
                )
            finally:
                await engine.shutdown()
                delivering.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await delivering
    out.write("\n" + NEXT_STEPS + "\n")
    out.flush()
    return code


def _button(card: CardText, label: str) -> Press | None:
    """The press the card's button ``label`` sends (None: the card offers no such button)."""
    return next((press for row in card.buttons for shown, press in row if shown == label), None)


async def _play(engine: EngineApi, channel: ConsoleChannel, workspace: Path) -> int:
    channel.line("demo", f"a fake chat; the agent works in {workspace}")
    sid = await engine.session_for_chat(DEMO_CHAT)

    channel.line("you", "/plan Add a greeting module with a test")
    started = channel.started
    _show(
        channel,
        await engine.command(
            sid, "plan", "Add a greeting module with a test", actor=OWNER, actor_name=OWNER_NAME
        ),
    )
    await channel.settle(sid, started)

    data = await engine.plan_card(sid)
    channel.line("plan text", (data.markdown or "").rstrip())
    approve = _button(plan_card_text(data, now=time.time()), APPROVE)
    if approve is None or data.state != "review":
        channel.line("demo", f"unexpected plan state: {data.state}")
        return 1
    channel.line("you", f"(taps {APPROVE})")
    started = channel.started
    _show(channel, await engine.press(sid, approve, actor=OWNER, actor_name=OWNER_NAME))
    await channel.settle(sid, started)

    channel.line("you", "/goal Keep the greeting test passing")
    started = channel.started
    _show(
        channel,
        await engine.command(
            sid, "goal", "Keep the greeting test passing", actor=OWNER, actor_name=OWNER_NAME
        ),
    )
    await channel.settle(sid, started)
    for _ in range(200):
        goal = (await engine.goal_card(sid)).goal
        if goal is not None and goal.phase != "active":
            break
        await asyncio.sleep(0.05)
    await channel.settle(sid, 0)

    channel.line("you", "/status")
    _show(channel, await engine.command(sid, "status", "", actor=OWNER, actor_name=OWNER_NAME))
    files = sorted(p.name for p in workspace.iterdir())
    channel.line("demo", f"workspace now holds: {', '.join(files)}")
    ok = (await engine.plan_card(sid)).state == "done" and (workspace / "greet.py").exists()
    channel.line("demo", "finished" if ok else "the demo did not reach a completed plan")
    return 0 if ok else 1


def main(*, fast: bool = False) -> int:
    """Entry point for ``plangate demo``; ``fast`` prints without pauses."""
    return asyncio.run(run_demo(pace_s=0.0 if fast else PACE_S))
