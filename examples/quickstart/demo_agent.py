#!/usr/bin/env python3
"""A demonstration agent for the symphony quickstart. It makes no model calls.

It speaks the same stdio protocol as `codex app-server` (JSON lines: `initialize`,
`thread/start`, `turn/start`, streamed notifications, `turn/completed`), so symphony drives it
exactly as it would drive codex (stdlib only, Python 3.9 or newer). On each turn it does a
small, real piece of work in its workspace (the current directory):

1. writes or extends `NOTES/<ticket>.md` with the ticket and the prompt it was given, and
   appends a line to each file of the workspace the prompt names in backticks (`calc.py`);
2. if the workspace is a git work tree, commits those files as `symphony-demo`;
3. reports token usage (estimated, nothing is billed);
4. in a workflow with stages (symphony advertised `report_outcome`): reports the outcome
   instead of moving the ticket. In a stage whose name has `plan` in it (the prompt says
   `Stage: <name>`) it writes no code and reports `done` with a short plan naming those files;
   in any other stage it does the work above and reports `done` with a summary. The daemon
   moves the ticket;
5. otherwise, if symphony advertised the `local_move_issue` tool, calls it with
   `{"state": "Human Review"}` so the ticket leaves the active states;
6. completes the turn with a short summary.

When the daemon's verification of a `done` fails, it gets a fix turn (the prompt says which
gate failed): it commits what it left uncommitted, records the lesson for later tickets
(`record_learning`) and reports `done` again. A ticket whose text
says the agent "forgets to commit" gets a first try that leaves its notes uncommitted, so the
quickstart shows the daemon catching it. One whose text says the agent "leaves a TODO" gets a
TODO line on its first try, which the quickstart's stand-in CI catches on the pull request; the
daemon's fix run (its prompt starts with the failed checks) then takes it out and commits.

For trying the stage machine's other paths: `DEMO_AGENT_OUTCOME=blocked` reports `blocked`
with a question, `DEMO_AGENT_OUTCOME=silent` never reports (the daemon's progress guard then
escalates the ticket), and `DEMO_AGENT_FOLLOW_UP` (JSON arguments of `create_follow_up`) makes
the first implementing turn split off a follow-up ticket.

It pauses briefly between steps so the run is visible on the dashboard; set
`DEMO_AGENT_DELAY_MS` (default 1000, the total per turn) to change that. A `turn/interrupt`
ends the turn as `interrupted`; closing stdin ends the process.

To run a real coding agent instead, install codex (`npm install -g @openai/codex`), log in
(`codex login`), and set the workflow's `codex.command` to `codex app-server`.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

Message = dict[str, Any]

MOVE_TOOL = "local_move_issue"
REPORT_TOOL = "report_outcome"
FOLLOW_UP_TOOL = "create_follow_up"
LEARN_TOOL = "record_learning"
REVIEW_STATE = "Human Review"
FIX_TURN = "the daemon ran this stage's verification"
FORGETS_TO_COMMIT = "forgets to commit"
LEAVES_A_TODO = "leaves a TODO"
CHECKS_FAILED = "Checks failed on pull request"
"""How the daemon's fix run for a pull request's failed checks begins."""
CONFLICT = re.compile(r"no longer merges onto `(?:origin/)?([^`]+)`")
"""How the daemon tells a run its branch conflicts with the target (a fix run, or a first run
whose worktree could not be brought up to date)."""
NOTES_DIR = "NOTES"
GIT_IDENTITY = ["-c", "user.name=symphony-demo", "-c", "user.email=demo@localhost"]


class Interrupted(Exception):
    """The client asked to stop the running turn."""


class Channel:
    """JSON lines over stdin/stdout, with a read that can time out (for interruptible pauses)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.held: list[Message] = []
        self.eof = False
        self.next_request_id = 0

    def send(self, message: Message) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    def notify(self, method: str, params: Message) -> None:
        self.send({"method": method, "params": params, "emittedAtMs": int(time.time() * 1000)})

    def read(self, timeout_s: float | None = None) -> Message | None:
        """The next message, or None at EOF or when `timeout_s` passes first."""
        if self.held:
            return self.held.pop(0)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            newline = self.buffer.find(b"\n")
            if newline >= 0:
                line, self.buffer = self.buffer[:newline], self.buffer[newline + 1 :]
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if isinstance(message, dict):
                    return message
                continue
            if self.eof:
                return None
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([sys.stdin.fileno()], [], [], wait)
            if not ready:
                return None
            chunk = os.read(sys.stdin.fileno(), 65536)
            if not chunk:
                self.eof = True
            self.buffer += chunk

    def request(self, method: str, params: Message) -> Message:
        """Ask the client something and wait for its answer; an interrupt ends the turn."""
        request_id = self.next_request_id  # server request ids count from 0, as codex's do
        self.next_request_id += 1
        self.send({"id": request_id, "method": method, "params": params})
        while True:
            message = self.read()
            if message is None:
                sys.exit(0)
            if message.get("id") == request_id and "method" not in message:
                return message
            self.hold_or_interrupt(message)

    def pause(self, seconds: float) -> None:
        """Sleep, but wake for a turn/interrupt."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            message = self.read(left)
            if message is None:
                if self.eof:
                    sys.exit(0)
                return
            self.hold_or_interrupt(message)

    def hold_or_interrupt(self, message: Message) -> None:
        if message.get("method") == "turn/interrupt" and "id" in message:
            self.send({"id": message["id"], "result": {}})
            raise Interrupted
        self.held.append(message)


class DemoAgent:
    def __init__(self) -> None:
        self.channel = Channel()
        self.thread_id = ""
        self.tools: set[str] = set()
        self.turns = 0
        self.input_tokens = 0
        self.output_tokens = 0
        delay_ms = os.environ.get("DEMO_AGENT_DELAY_MS", "1000")
        self.step_s = max(0, int(delay_ms) if delay_ms.isdigit() else 1000) / 1000 / 5

    def run(self) -> None:
        while True:
            message = self.channel.read()
            if message is None:
                return
            method, request_id = message.get("method"), message.get("id")
            if not isinstance(method, str) or request_id is None:
                continue  # notifications (`initialized`) and stray replies need nothing
            params = message.get("params") or {}
            if method == "initialize":
                self.reply(request_id, self.initialize_result())
            elif method == "thread/start":
                self.reply(request_id, self.start_thread(params))
            elif method == "turn/start":
                self.run_turn(request_id, params)
            elif method == "turn/interrupt":
                self.reply(request_id, {})
            else:
                self.channel.send(
                    {
                        "id": request_id,
                        "error": {"code": -32600, "message": f"demo agent: no {method}"},
                    }
                )

    def reply(self, request_id: Any, result: Message) -> None:
        self.channel.send({"id": request_id, "result": result})

    def initialize_result(self) -> Message:
        return {
            "userAgent": "symphony-demo-agent/1.0",
            "codexHome": "",
            "platformFamily": "unix",
            "platformOs": sys.platform,
        }

    def start_thread(self, params: Message) -> Message:
        self.thread_id = str(uuid.uuid4())
        self.tools = {
            tool["name"]
            for tool in params.get("dynamicTools") or []
            if isinstance(tool, dict) and isinstance(tool.get("name"), str)
        }
        cwd = params.get("cwd") or os.getcwd()
        thread: Message = {
            "id": self.thread_id,
            "cwd": cwd,
            "status": {"type": "idle"},
            "turns": [],
        }
        self.channel.notify("thread/started", {"thread": thread})
        return {
            "thread": thread,
            "model": "demo",  # priced in the quickstart WORKFLOW.md; no model is called
            "modelProvider": "demo",
            "cwd": cwd,
            "approvalPolicy": params.get("approvalPolicy", "never"),
            "approvalsReviewer": "user",
            "sandbox": {"type": "workspaceWrite"},
        }

    # -- one turn ---------------------------------------------------------------------------

    def run_turn(self, request_id: Any, params: Message) -> None:
        self.turns += 1
        turn_id = str(uuid.uuid4())
        prompt = "".join(
            part.get("text", "")
            for part in params.get("input") or []
            if isinstance(part, dict) and part.get("type") == "text"
        )
        self.reply(request_id, {"turn": {"id": turn_id, "status": "inProgress", "items": []}})
        turn = TurnWork(self, turn_id, prompt)
        try:
            summary = turn.work()
        except Interrupted:
            turn.finish("interrupted")
            return
        turn.finish("completed", summary)

    def add_usage(self, input_tokens: int, output_tokens: int) -> Message:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        return {
            "inputTokens": self.input_tokens,
            "cachedInputTokens": 0,
            "outputTokens": self.output_tokens,
            "reasoningOutputTokens": 0,
            "totalTokens": self.input_tokens + self.output_tokens,
        }


class TurnWork:
    def __init__(self, agent: DemoAgent, turn_id: str, prompt: str) -> None:
        self.agent = agent
        self.channel = agent.channel
        self.turn_id = turn_id
        self.prompt = unfenced(prompt)
        self.item_count = 0
        self.identifier, self.title = ticket_of(prompt)

    def ids(self) -> Message:
        return {"threadId": self.agent.thread_id, "turnId": self.turn_id}

    def new_item(self, kind: str, **fields: Any) -> Message:
        self.item_count += 1
        item = {"type": kind, "id": f"item_{self.item_count}", **fields}
        self.channel.notify("item/started", {**self.ids(), "item": item})
        return item

    def done(self, item: Message, **fields: Any) -> None:
        self.channel.notify("item/completed", {**self.ids(), "item": {**item, **fields}})

    def say(self, text: str) -> None:
        item = self.new_item("agentMessage", text="")
        for word in re.findall(r"\S+\s*", text):
            self.channel.notify(
                "item/agentMessage/delta", {**self.ids(), "itemId": item["id"], "delta": word}
            )
        self.done(item, text=text)

    def usage(self, input_tokens: int, output_tokens: int) -> None:
        total = self.agent.add_usage(input_tokens, output_tokens)
        last = {
            "inputTokens": input_tokens,
            "cachedInputTokens": 0,
            "outputTokens": output_tokens,
            "reasoningOutputTokens": 0,
            "totalTokens": input_tokens + output_tokens,
        }
        self.channel.notify(
            "thread/tokenUsage/updated",
            {**self.ids(), "tokenUsage": {"total": total, "last": last}},
        )

    def work(self) -> str:
        self.channel.notify(
            "turn/started",
            {
                "threadId": self.agent.thread_id,
                "turn": {"id": self.turn_id, "status": "inProgress"},
            },
        )
        user = self.new_item("userMessage", content=[{"type": "text", "text": self.prompt}])
        self.done(user)
        self.say(f"Demo agent here: taking notes for {self.identifier}. No model is involved.")
        self.channel.pause(self.agent.step_s)

        if REPORT_TOOL in self.agent.tools:
            return self.work_in_stage()

        notes = self.write_notes()
        self.usage(len(self.prompt) // 4 + 400, 60)
        self.channel.pause(self.agent.step_s)

        committed = self.commit(notes)
        self.channel.pause(self.agent.step_s)

        moved = self.move_to_review()

        summary = (
            f"Wrote {notes}"
            + (", committed it" if committed else "")
            + (f", moved {self.identifier} to {REVIEW_STATE}." if moved else ".")
        )
        self.say(summary)
        self.usage(200, 40)
        self.channel.pause(self.agent.step_s)
        return summary

    def work_in_stage(self) -> str:
        """Stage mode: do the stage's part and report it; never move the ticket."""
        match = re.search(r"\bStage:\s*([\w.-]+)", self.prompt)
        stage = match.group(1) if match else "work"
        outcome = os.environ.get("DEMO_AGENT_OUTCOME", "done")
        if outcome == "silent":
            summary = f"Still looking at {self.identifier} (stage {stage}); nothing to report yet."
            self.say(summary)
            return summary
        if outcome == "blocked":
            self.call_tool(
                REPORT_TOOL,
                {
                    "outcome": "blocked",
                    "summary": f"I cannot finish {self.identifier} without a decision.",
                    "open_questions": ["Which behaviour do you want when the input is empty?"],
                },
            )
            return f"Reported {self.identifier} as blocked."
        if FIX_TURN in self.prompt:
            notes = f"{NOTES_DIR}/{safe_name(self.identifier)}.md"
            self.usage(len(self.prompt) // 4 + 200, 40)
            output = re.search(r"The end of its output:\n+(.+)", self.prompt)
            said = output.group(1).splitlines()[0] if output and output.group(1) else "nothing"
            committed = self.commit(notes, *self.uncommitted())
            summary = f"Verification said {said!r}; " + (
                f"committed {notes}." if committed else "nothing was left to commit."
            )
            if LEARN_TOOL in self.agent.tools:
                self.call_tool(
                    LEARN_TOOL,
                    {
                        "topic": "commit before reporting",
                        "text": "Commit every change before reporting done: the daemon's "
                        "`committed` check fails on anything left uncommitted.",
                    },
                )
            self.call_tool(REPORT_TOOL, {"outcome": "done", "summary": summary})
            self.say(summary)
            return summary
        if CHECKS_FAILED in self.prompt:
            return self.fix_checks()
        conflict = CONFLICT.search(self.prompt)
        if conflict is not None:
            return self.resolve_conflict(conflict.group(1))
        if "plan" in stage.lower():
            files = files_named(self.prompt)
            plan = (
                f"1. Read the code that {self.title!r} touches.\n"
                f"2. Make the change for {self.identifier} in one small commit"
                + (f", in {', '.join(f'`{f}`' for f in files)}" if files else "")
                + ".\n3. Note what was done in NOTES/ so the reviewer can follow it."
            )
            self.usage(len(self.prompt) // 4 + 300, 80)
            self.call_tool(
                REPORT_TOOL,
                {"outcome": "done", "summary": "Plan written; nothing changed yet.", "plan": plan},
            )
            return f"Planned {self.identifier}."
        # The first implementing turn in this workspace: it has no notes yet.
        first = not Path(f"{NOTES_DIR}/{safe_name(self.identifier)}.md").exists()
        notes = self.write_notes()
        touched = self.touch_files(slip=first and LEAVES_A_TODO in self.prompt)
        self.usage(len(self.prompt) // 4 + 400, 60)
        # A deliberate slip for the demonstration: the daemon's verification catches it.
        committed = FORGETS_TO_COMMIT not in self.prompt and self.commit(notes, *touched)
        follow_up = os.environ.get("DEMO_AGENT_FOLLOW_UP")
        if follow_up and self.agent.turns == 1 and FOLLOW_UP_TOOL in self.agent.tools:
            self.call_tool(FOLLOW_UP_TOOL, json.loads(follow_up))
        summary = f"Wrote {notes}" + (", committed it." if committed else ".")
        self.call_tool(REPORT_TOOL, {"outcome": "done", "summary": summary})
        self.say(summary)
        return summary

    def call_tool(self, tool: str, arguments: Message) -> bool:
        item = self.new_item("dynamicToolCall", tool=tool, arguments=arguments, status="inProgress")
        reply = self.channel.request(
            "item/tool/call",
            {
                **self.ids(),
                "callId": item["id"],
                "tool": tool,
                "arguments": arguments,
                "namespace": None,
            },
        )
        result = reply.get("result")
        success = isinstance(result, dict) and result.get("success") is True
        self.done(item, status="completed" if success else "failed")
        self.channel.pause(self.agent.step_s)
        return success

    def write_notes(self) -> str:
        relative = f"{NOTES_DIR}/{safe_name(self.identifier)}.md"
        path = Path(relative)
        created = not path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        heading = f"# {self.identifier}: {self.title}\n\n" if created else ""
        intro = "Notes kept by the symphony demo agent, which calls no model.\n" if created else ""
        # timezone.utc, not datetime.UTC: the quickstart may run this on a python3 older than 3.11.
        when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")  # noqa: UP017
        quoted = "\n".join(f"> {line}" if line else ">" for line in self.prompt[:4000].splitlines())
        entry = f"\n## Turn {self.agent.turns} ({when})\n\nThe prompt was:\n\n{quoted}\n"
        item = self.new_item(
            "fileChange",
            changes=[
                {"path": relative, "kind": {"type": "add" if created else "update"}, "diff": ""}
            ],
            status="inProgress",
        )
        with path.open("a", encoding="utf-8") as file:
            file.write(heading + intro + entry)
        self.done(item, status="completed")
        return relative

    def fix_checks(self) -> str:
        """A fix run for the pull request's failed checks: take out what the checks complained
        of (the TODO lines this agent leaves on purpose), commit, report done."""
        cleaned = []
        for name in tracked_python_files():
            lines = Path(name).read_text(encoding="utf-8").splitlines(keepends=True)
            kept = [line for line in lines if "TODO" not in line]
            if kept != lines:
                Path(name).write_text("".join(kept), encoding="utf-8")
                cleaned.append(name)
        notes = self.write_notes()
        self.usage(len(self.prompt) // 4 + 200, 40)
        committed = self.commit(notes, *cleaned)
        summary = (
            f"The pull request's checks failed; removed the TODO from {', '.join(cleaned)}"
            if cleaned
            else "The pull request's checks failed; found nothing of mine to take out"
        ) + (" and committed." if committed else ".")
        self.call_tool(REPORT_TOOL, {"outcome": "done", "summary": summary})
        self.say(summary)
        return summary

    def resolve_conflict(self, base: str) -> str:
        """The branch conflicts with its target: merge the target in and keep both sides of
        each conflict (this agent's lines are notes appended at the end, so both belong).
        With DEMO_AGENT_CONFLICTS=ignore it only writes notes, as an agent that does not
        understand would: the daemon's cap on conflict fixes then sends the ticket to a
        person."""
        notes = self.write_notes()
        self.usage(len(self.prompt) // 4 + 300, 60)
        if os.environ.get("DEMO_AGENT_CONFLICTS") == "ignore":
            self.commit(notes)
            summary = f"Looked at the conflict with {base}; wrote notes, resolved nothing."
        else:
            run(["git", *GIT_IDENTITY, "merge", "--no-edit", "--quiet", f"origin/{base}"])
            code, output = run(["git", "diff", "--name-only", "--diff-filter=U"])
            conflicted = output.split() if code == 0 else []
            for name in conflicted:
                keep_both_sides(Path(name))
            if conflicted:  # a merge in progress is committed whole, with the notes
                code, _ = run(["git", "add", "--", notes, *conflicted])
                merged = (
                    code == 0
                    and run(["git", *GIT_IDENTITY, "commit", "--quiet", "--no-edit"])[0] == 0
                )
                if not merged:
                    run(["git", "merge", "--abort"])
            else:
                merged = self.commit(notes)
            summary = (
                f"Merged {base} and kept both sides in {', '.join(conflicted)}."
                if conflicted and merged
                else f"Merged {base}: nothing conflicted here."
            )
        self.call_tool(REPORT_TOOL, {"outcome": "done", "summary": summary})
        self.say(summary)
        return summary

    def touch_files(self, *, slip: bool = False) -> list[str]:
        """The files the plan (or the ticket) names: each gets a line saying what the ticket
        was, at its end, as a stand-in for a real change (for a ticket that says the agent
        leaves a TODO, a TODO line the pull request's checks catch)."""
        files = files_named(self.prompt)
        for name in files:
            with open(name, "a", encoding="utf-8") as file:
                file.write(f"# {self.identifier}: {self.title}\n")
                if slip:
                    file.write(f"# TODO {self.identifier}: tidy this up before merging\n")
        return files

    def uncommitted(self) -> list[str]:
        code, output = run(["git", "status", "--porcelain", "--untracked-files=all"])
        return [line[3:] for line in output.splitlines() if line[3:]] if code == 0 else []

    def commit(self, notes: str, *also: str) -> bool:
        if run(["git", "rev-parse", "--is-inside-work-tree"])[1].strip() != "true":
            return False
        message = f"{self.identifier}: demo notes (turn {self.agent.turns})"
        command = ["git", *GIT_IDENTITY, "commit", "--quiet", "-m", message, "--", notes, *also]
        item = self.new_item(
            "commandExecution",
            command=" ".join(command),
            cwd=os.getcwd(),
            commandActions=[],
            status="inProgress",
        )
        code, output = run(["git", "add", "--", notes, *also])
        if code == 0:
            code, output = run(command)
        status = "completed" if code == 0 else "failed"
        self.done(item, status=status, exitCode=code, aggregatedOutput=output)
        return code == 0

    def move_to_review(self) -> bool:
        if MOVE_TOOL not in self.agent.tools:
            return False
        return self.call_tool(MOVE_TOOL, {"state": REVIEW_STATE})

    def finish(self, status: str, summary: str | None = None) -> None:
        items = (
            [] if summary is None else [{"type": "agentMessage", "id": "final", "text": summary}]
        )
        turn = {"id": self.turn_id, "status": status, "error": None, "items": items}
        self.channel.notify("turn/completed", {"threadId": self.agent.thread_id, "turn": turn})


def keep_both_sides(path: Path) -> None:
    """Resolve git's conflict markers in `path` by keeping ours, then theirs."""
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if not line.startswith(("<<<<<<< ", "=======", ">>>>>>> ", "||||||| ")):
            kept.append(line)
    path.write_text("".join(kept), encoding="utf-8")


def tracked_python_files() -> list[str]:
    code, output = run(["git", "ls-files", "--", "*.py"])
    return output.split() if code == 0 else []


def files_named(prompt: str) -> list[str]:
    """The files of the workspace (the current directory) the prompt names in backticks."""
    named = re.findall(r"`([\w./-]+)`", prompt)
    return [name for name in dict.fromkeys(named) if Path(name).is_file()]


STANDING = re.compile(r"^Text between `⟦untrusted .*?never repeat it anywhere\.\n*", re.DOTALL)
FENCE_OPEN = re.compile(r"\n?⟦untrusted \w+: [^⟧\n]*⟧[ \n]?")
FENCE_CLOSE = re.compile(r"[ \n]?⟦end \w+⟧")


def unfenced(prompt: str) -> str:
    """The prompt as the demo reads it: without the daemon's standing instruction (whose
    marker an agent never repeats, so the notes it keeps must not quote it) and with the
    fenced text from the ticket unwrapped."""
    return FENCE_CLOSE.sub("", FENCE_OPEN.sub("", STANDING.sub("", prompt)))


def ticket_of(prompt: str) -> tuple[str, str]:
    """The ticket identifier and title named by the prompt, else the workspace's name."""
    # Identifiers may be `DEMO-1`, `ENG-12`, or a forge's `owner/name#12`.
    prompt = unfenced(prompt)
    match = re.search(r"\bticket\s+([A-Za-z0-9][\w./#-]*)\s*:\s*(.+)", prompt)
    if match:
        return match.group(1), match.group(2).strip().rstrip(".")
    return Path.cwd().name, "(the prompt names no ticket)"


def safe_name(identifier: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", identifier) or "ticket"


def run(command: list[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,  # stdin carries the protocol; no child may read it
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, (done.stdout + done.stderr)[-2000:]


if __name__ == "__main__":
    DemoAgent().run()
