"""`trialbot console`: the same commands in a terminal, with an embedded
worker and the terminal as the channel. No Slack workspace needed.

When stdin is not a terminal, lines are processed in order and each trial's
report is printed before the next line is read, so scripts are deterministic.
In a terminal, a message posted later (a report) is printed on its own line
and the `> ` prompt drawn again under it.

Slack shows a message's blocks, not its text; the console prints the text and
then every line of the blocks the text lacks (context lines, section fields,
headers), so it drops nothing Slack would show.
"""
from __future__ import annotations

import datetime as dt
import functools
import json
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable

from bot import access, commands
from bot.app.runtime import Runtime
from bot.trials import command as trial_command
from bot.trials.job import ENDED
from worker import i18n
from worker.i18n import _

CHANNEL = "console"
USER = "console"


def files_dir(db: str) -> str:
    """Where the console writes the files the bot would upload (charts, exports):
    `trialbot-files/` beside the database (.gitignore covers it)."""
    return os.path.join(os.path.dirname(os.path.abspath(db)), "trialbot-files")


def run(db: str, as_json: bool, stdin=None, stdout=None, user=None, recipes=None) -> int:
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    files = files_dir(db)
    # The console's one user is the operator of this box: an admin, no settings needed.
    transport = ConsoleTransport(stdout, as_json, files)
    rt = Runtime(db, secrets.token_urlsafe(24), transport, policy=access.operator(USER))
    transport.language = rt.store.channel_lang
    for channel in rt.store.held_channels():  # left by `serve`: no Slack here to ask
        trial_command.settle(rt.ctx, channel, None)
    rt.start()
    # user: --trial-user, a worker.trialuser.TrialUser; recipes: --recipes (worker/offer.py)
    # Its worker is this person's own: `/plan NAME check repo=/path` may read their disk.
    os.environ.setdefault("TRIALBOT_CHECK_LOCAL", "1")
    rt.start_local_worker(user=user, recipes=recipes)
    interactive = stdin.isatty()
    if interactive:
        with i18n.using(rt.store.channel_lang(CHANNEL)):
            print(_("trialbot console — type `/trial help`, `/trial llm-infer`, or `quit`."),
                  file=stdout, flush=True)
    reason = "quit"  # the embedded worker's trial goes back to the queue saying why
    try:
        for line in _lines(stdin, transport, interactive):
            if line in ("quit", "exit"):
                break
            with transport.lock:  # the reply prints before the messages it causes
                reply, job = respond(rt, line)
                show(reply, stdout, as_json)
            if job and not interactive:
                wait_for_report(rt, job)
            elif not interactive:  # a digest, an export, a fit's chart print before the next line
                wait_for_checks(rt)  # and a `/plan NAME check`'s answer
                wait_for_outbox(rt)
    except KeyboardInterrupt:
        reason = "SIGINT"
    finally:
        rt.stop(reason)
    return 0


def _lines(stdin, transport, interactive):
    while True:
        if interactive:
            transport.prompt()
        line = stdin.readline()
        transport.answered()
        if not line:
            return
        line = line.strip()
        if line and not line.startswith("#"):
            yield line


def respond(rt: Runtime, line: str) -> tuple[dict, dict | None]:
    """The line's reply and the job it queued, inside the catch-all (bot/commands.py)."""
    return commands.guarded(functools.partial(_respond, rt, line), lambda reply: (reply, None),
                            f"console {line!r}", functools.partial(rt.store.channel_lang,
                                                                   CHANNEL))


def _respond(rt: Runtime, line: str) -> tuple[dict, dict | None]:
    command, _space, text = line.partition(" ")
    if command == "/trial":
        return commands.trial(rt.ctx, text, USER, CHANNEL)
    if command == "/plan":
        return commands.plan(rt.ctx, text, USER, CHANNEL,
                             dt.datetime.now(dt.timezone.utc).date()), None
    with i18n.using(rt.store.channel_lang(CHANNEL)):
        return {"response_type": "ephemeral",
                "text": _(":x: `{command}` is not a command here; lines start with `/trial` "
                          "or `/plan` (try `/trial help`).", command=command)}, None


def show(reply: dict, stdout, as_json: bool) -> None:
    if as_json:
        print(json.dumps(reply), file=stdout, flush=True)
    else:
        print(render(reply["text"], reply.get("blocks")), file=stdout, flush=True)


_MARKUP = re.compile(r":[a-z0-9_+-]+:|[*_`~]")


def _bare(text: str) -> str:
    """A line as compared with the text: no emoji codes, mrkdwn marks or spacing."""
    return " ".join(_MARKUP.sub("", text).split()).lower()


def _block_lines(block: dict) -> list[str]:
    """The lines Slack shows for one block (sections with their fields, context
    elements, headers); actions and dividers have none worth printing."""
    texts = []
    if block.get("type") in ("section", "header") and block.get("text"):
        texts.append(block["text"].get("text") or "")
    texts += [f.get("text") or "" for f in block.get("fields") or []]
    if block.get("type") == "context":
        texts += [e.get("text") or e.get("alt_text") or "" for e in block.get("elements") or []]
    return [line for t in texts for line in t.replace("```", "\n").splitlines()]


def render(text: str, blocks: list[dict] | None) -> str:
    """The message's text, then the lines of its blocks that the text lacks."""
    have = _bare(text)
    extra = []
    for block in blocks or []:
        for line in _block_lines(block):
            bare = _bare(line)
            if bare and bare not in have and line not in extra:
                extra.append(line)
    return "\n".join([text, *extra]) if extra else text


def wait_for_outbox(rt: Runtime, timeout: float = 60, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while rt.store.unsent(limit=1) and time.monotonic() < deadline:
        time.sleep(poll)


def wait_for_checks(rt: Runtime, timeout: float = 330, poll: float = 0.05) -> None:
    """Until the embedded worker answered the checks asked (its fetch stops at 300 s)."""
    deadline = time.monotonic() + timeout
    while rt.store.checks_open() and time.monotonic() < deadline:
        time.sleep(poll)


def wait_for_report(rt: Runtime, job: dict, poll: float = 0.1) -> dict:
    """Block until the job ended and all its messages (report, chart) were printed."""
    deadline = time.monotonic() + job["spec"]["params"].get("timeout", 1800) + 120
    while time.monotonic() < deadline:
        current = rt.store.job(job["id"])
        assert current is not None  # the store never deletes a job
        if current["status"] in ENDED and not rt.store.unsent_for(job["id"]):
            return current
        time.sleep(poll)
    raise TimeoutError(f"{job['trial']} did not report in time")


class ConsoleTransport:
    """The terminal as the channel: prints each message; `--json` prints the
    exact payload that would go to Slack, one object per line."""
    update_interval = 0.0  # a terminal has no rate limit

    def __init__(self, out, as_json: bool, files_dir: str = "."):
        self.out, self.as_json, self.count = out, as_json, 0
        self.files_dir = files_dir
        self.lock = threading.Lock()
        self.tty = _isatty(out)
        self.prompting = False  # "> " is on the terminal's last line, awaiting input
        # a channel's language (run() gives the store's)
        self.language: Callable[[str | None], str | None] = lambda channel: None

    def prompt(self) -> None:
        with self.lock:
            print("> ", end="", file=self.out, flush=True)
            self.prompting = True

    def answered(self) -> None:
        with self.lock:
            self.prompting = False

    def _print(self, text: str) -> None:
        """One message; in a terminal waiting at the prompt, on a line of its own
        (the prompt line cleared first) with the prompt drawn again under it."""
        redraw = self.tty and self.prompting
        print(("\r\x1b[K" if redraw else "") + text, file=self.out,
              end="\n> " if redraw else "\n", flush=True)

    def send(self, payload: dict) -> str:
        with self.lock:
            self.count += 1
            if "content" in payload:  # files land next to the database
                os.makedirs(self.files_dir, exist_ok=True)
                path = os.path.join(self.files_dir, payload.pop("file"))
                content = payload.pop("content")
                with open(path, "wb") as f:
                    f.write(content.encode() if isinstance(content, str) else content)
                payload["file"] = path
                if not self.as_json:
                    payload = dict(payload, text=f"{payload['text']}: {path}")
            if self.as_json:
                self._print(json.dumps({k: v for k, v in payload.items() if k != "url"}))
                return f"console.{self.count}"
            with i18n.using(self.language(payload["channel"])):
                where = _where(payload)
                text = render(payload["text"], payload.get("blocks"))
                if payload.get("update"):
                    self._print(_("[{where}] (updated {ts})", where=where, ts=payload["ts"])
                                + f"\n{text}")
                    return payload["ts"]
            indent = "    " if payload.get("thread_ts") else ""
            body = "\n".join(indent + line for line in text.splitlines())
            self._print(f"[{where}]\n{body}")
            return f"console.{self.count}"


def _where(payload: dict) -> str:
    """Who a message reaches, as the console frames it."""
    if not payload.get("via"):
        return f"#{payload['channel']}"
    if payload["via"] == "ephemeral":
        return _("#{channel}, to <@{user}> only", channel=payload["channel"],
                 user=payload["user"])
    return _("to <@{user}>", user=payload.get("user"))


def _isatty(out) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):  # a StringIO, a closed file
        return False
