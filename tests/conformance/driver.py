"""One contract driver process, as the runner sees it (tests/conformance/PROTOCOL.md): steps
written as JSON lines, answers matched by id, lost events collected as they come.

The driver runs in a process group of its own, which pause()/resume() stop and continue as
a whole (a paused client) and close() kills. Every wait is bounded."""

import json
import os
import signal
import subprocess
import threading
import time

SKIP_STATUS = 77  # a driver that cannot run here exits with it before reading stdin
ANSWER_SLACK_S = 30.0  # beyond a step's own wait_ms, how long an answer may take


class DriverSkipped(Exception):
    """The driver exited 77: its client cannot run here (the message says why)."""


class DriverFailed(Exception):
    """The driver broke the protocol, died, or did not answer in time."""


class Driver:
    def __init__(self, name, argv, env, log_path):
        self.name = name
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     env=env, cwd=env.get("LEASEGATE_REPO", "."), start_new_session=True)
        self.cond = threading.Condition()
        self.answers = {}
        self.events = []
        self.protocol_errors = []
        self.next_id = 0
        self.eof = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            try:
                msg = json.loads(line)
                if not isinstance(msg, dict):
                    raise ValueError("not an object")
            except ValueError as e:
                with self.cond:
                    self.protocol_errors.append("not a JSON object line (%s): %r" % (e, line[:200]))
                    self.cond.notify_all()
                continue
            with self.cond:
                if "id" in msg:
                    self.answers[msg["id"]] = msg
                elif msg.get("event"):
                    msg["received_ms"] = int(time.time() * 1000)
                    self.events.append(msg)
                else:
                    self.protocol_errors.append("neither an answer nor an event: %r" % line[:200])
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def send(self, op, **fields):
        """Writes a step; returns its id (answer() waits for the answer)."""
        self.next_id += 1
        step = dict(id=self.next_id, op=op, **fields)
        try:
            self.proc.stdin.write((json.dumps(step) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            self._died("before step %r" % step)
        return self.next_id

    def answer(self, step_id, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while step_id not in self.answers:
                if self.protocol_errors:
                    raise DriverFailed("%s: %s" % (self.name, self.protocol_errors[0]))
                left = deadline - time.monotonic()
                if self.eof or left <= 0:
                    break
                self.cond.wait(left)
            else:
                return self.answers.pop(step_id)
        if self.eof:
            self._died("before answering step %d" % step_id)
        raise DriverFailed("%s: no answer to step %d within %.0f s" % (self.name, step_id, timeout))

    def call(self, op, **fields):
        """A step and its answer (a dict with ok...)."""
        timeout = ANSWER_SLACK_S + (fields.get("wait_ms") or 0) / 1000.0
        return self.answer(self.send(op, **fields), timeout)

    def hello(self, servers, owner, timeout_ms=2000, retry_for_ms=5000):
        step = self.send("hello", servers=servers, owner=owner, timeout_ms=timeout_ms, retry_for_ms=retry_for_ms)
        try:
            reply = self.answer(step, ANSWER_SLACK_S)
        except DriverFailed:
            if self.proc.poll() == SKIP_STATUS:
                raise DriverSkipped(self.stderr_tail().strip() or "exit status 77") from None
            raise
        if not reply.get("ok"):
            raise DriverFailed("%s: hello failed: %r" % (self.name, reply))
        self.capabilities = set(reply.get("capabilities") or ())
        return reply

    def lost_event(self, lease_ref, timeout):
        """The lost event of lease_ref, waiting up to timeout seconds; None if none came."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for e in self.events:
                    if e.get("event") == "lost" and e.get("lease_ref") == lease_ref:
                        return e
                left = deadline - time.monotonic()
                if left <= 0 or self.eof:
                    return None
                self.cond.wait(left)

    def lost_events(self):
        with self.cond:
            return [e for e in self.events if e.get("event") == "lost"]

    def pause(self):
        self._group(signal.SIGSTOP)

    def resume(self):
        self._group(signal.SIGCONT)

    def _group(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def close(self):
        self.resume()
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self._group(signal.SIGKILL)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.log.close()

    def stderr_tail(self, limit=4000):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            data = f.read()
        return data[-limit:].decode("utf-8", "replace")

    def _died(self, when):
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            pass
        raise DriverFailed("%s exited (status %r) %s; its stderr ends:\n%s"
                           % (self.name, self.proc.poll(), when, self.stderr_tail()))
