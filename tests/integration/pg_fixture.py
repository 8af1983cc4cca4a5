"""PostgreSQL for the tests: Debian's postgresql-15 server, started from /usr/lib/postgresql/15/bin
in a temporary data directory on a free 127.0.0.1 port, and stopped by PID.

scripts/deps.sh --test installs the server (without creating a main cluster), python3-psycopg2
and the Node example's npm packages. initdb refuses to run as root, so as root the server runs
as the unprivileged user `postgres` that Debian's package creates (`nobody` when it is absent),
in a directory that user owns; as any other user it runs as that user. Clients log in over TCP
with a password (scram-sha-256), through the standard libpq variables in env().

  python3 tests/integration/pg_fixture.py     exits 1, saying what is missing, unless the SQL
                                              fencing tests can run in full (.ci/run calls it)

Every wait here is bounded."""

import functools
import os
import pwd
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from upstream import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PG_BIN = "/usr/lib/postgresql/15/bin"
NODE_PG = os.path.join(ROOT, "examples", "sql", "node_modules", "pg", "package.json")
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
SQL_TIMEOUT_S = 30.0


def missing_server():
    """Why the server cannot be started here, or None."""
    for tool in ("initdb", "postgres", "psql"):
        if not os.access(os.path.join(PG_BIN, tool), os.X_OK):
            return ("%s/%s is missing: install the Debian package postgresql-15 "
                    "(scripts/deps.sh --test) to run the SQL fencing tests" % (PG_BIN, tool))
    return None


@functools.lru_cache(maxsize=None)
def python_with_psycopg2():
    """A python3 that can import psycopg2 (the Python example's driver), or None. The tests'
    own interpreter first; else Debian's /usr/bin/python3, which sees python3-psycopg2 (an
    interpreter from pyenv or a venv does not)."""
    for exe in (sys.executable, "/usr/bin/python3"):
        if exe and os.access(exe, os.X_OK):
            probe = subprocess.run([exe, "-c", "import psycopg2"], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
            if probe.returncode == 0:
                return exe
    return None


def missing_python():
    if python_with_psycopg2() is None:
        return ("psycopg2 is missing: install the Debian package python3-psycopg2 "
                "(scripts/deps.sh --test) to run the Python SQL example")
    return None


def missing_node():
    if shutil.which("node") is None:
        return "node is missing: install nodejs (scripts/deps.sh --test) to run the Node SQL example"
    if not os.path.exists(NODE_PG):
        return ("examples/sql/node_modules/pg is missing: run `npm ci` in examples/sql "
                "(scripts/deps.sh --test does) to run the Node SQL example")
    return None


def _server_user():
    """(uid, gid) the server runs as: ourselves, or an unprivileged system user when root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue
        if pw.pw_uid != 0:
            return pw.pw_uid, pw.pw_gid
    raise RuntimeError("running as root, and neither the user postgres nor nobody exists to run PostgreSQL")


class SqlError(Exception):
    """An ERROR line from psql; str() is PostgreSQL's message."""


class Postgres:
    """One PostgreSQL server with a superuser `leasegate` and a random password."""

    USER = "leasegate"
    DATABASE = "postgres"

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="leasegate-pg-")
        self.password = secrets.token_hex(16)
        self.proc = None
        self.port = None
        self._log = None
        self._sessions = []
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _as_user(self):
        ids = _server_user()
        if ids is None:
            return {}
        return {"user": ids[0], "group": ids[1], "extra_groups": []}

    def _start(self):
        ids = _server_user()
        pwfile = os.path.join(self.dir, "pwfile")
        with open(pwfile, "w") as f:
            f.write(self.password + "\n")
        if ids:
            os.chown(self.dir, *ids)
            os.chown(pwfile, *ids)
        data = os.path.join(self.dir, "data")
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        init = subprocess.run(
            [os.path.join(PG_BIN, "initdb"), "-D", data, "-U", self.USER, "--pwfile", pwfile,
             "--auth", "scram-sha-256", "-E", "UTF8", "--locale", "C", "--no-sync"],
            cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, timeout=120, **self._as_user())
        if init.returncode != 0:
            raise RuntimeError("initdb failed:\n" + init.stdout)
        os.unlink(pwfile)
        # A port taken between free_port() and the bind makes the server exit: try another.
        for _ in range(3):
            self.port = free_port()
            self._log = open(os.path.join(self.dir, "postgres.log"), "ab")
            self.proc = subprocess.Popen(
                [os.path.join(PG_BIN, "postgres"), "-D", data, "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
                 "-c", "max_connections=40", "-c", "shared_buffers=16MB"],
                cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                **self._as_user())
            if self._wait_ready():
                return
            self._stop_server()
        raise RuntimeError("PostgreSQL did not start; its log:\n" + self.log_text())

    def _wait_ready(self):
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            probe = subprocess.run([os.path.join(PG_BIN, "psql"), "-X", "-A", "-t", "-c", "SELECT 1"],
                                   env=self.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True, timeout=30)
            if probe.returncode == 0 and probe.stdout.strip() == "1":
                return True
            time.sleep(0.1)
        return False

    def log_text(self):
        try:
            with open(os.path.join(self.dir, "postgres.log"), errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def env(self, base=None, app=None):
        """base (default: this process's environment) with the libpq variables for this server."""
        out = dict(os.environ if base is None else base)
        out.update(PGHOST="127.0.0.1", PGPORT=str(self.port), PGUSER=self.USER,
                   PGPASSWORD=self.password, PGDATABASE=self.DATABASE)
        for var in ("PGSERVICE", "PGSERVICEFILE", "PGPASSFILE", "PGSSLMODE", "PGOPTIONS", "PGCONNECT_TIMEOUT"):
            out.pop(var, None)
        if app:
            out["PGAPPNAME"] = app
        return out

    def psql(self, *args, input=None, check=True):
        """psql with args (a script on stdin when input is given), stopping at the first error;
        a CompletedProcess with text stdout and stderr."""
        done = subprocess.run([os.path.join(PG_BIN, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"]
                              + list(args), input=input, env=self.env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=SQL_TIMEOUT_S * 2)
        if check and done.returncode != 0:
            raise SqlError("psql %s exited %d: %s" % (" ".join(args), done.returncode, done.stderr.strip()))
        return done

    def query(self, sql):
        """Rows of one or more statements (autocommit), each row a list of strings."""
        out = self.psql("-F", "\t", "-c", sql).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def session(self, name):
        s = Session(self, name)
        self._sessions.append(s)
        return s

    def backends_waiting_for_a_lock(self, app):
        """How many server processes of sessions named app wait for a lock now."""
        rows = self.query("SELECT count(*) FROM pg_stat_activity WHERE application_name = '%s' "
                          "AND wait_event_type = 'Lock'" % app)
        return int(rows[0][0])

    def wait_until_blocked(self, app):
        deadline = time.monotonic() + SQL_TIMEOUT_S
        while self.backends_waiting_for_a_lock(app) == 0:
            if time.monotonic() > deadline:
                raise AssertionError("session %s never waited for a lock" % app)
            time.sleep(0.02)

    def _stop_server(self):
        if self.proc is not None and self.proc.poll() is None:
            # SIGINT: fast shutdown (SIGTERM would wait for every client to leave).
            os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(STOP_TIMEOUT_S)
        self.proc = None
        if self._log:
            self._log.close()
            self._log = None

    def stop(self):
        for s in self._sessions:
            s.close()
        self._sessions = []
        self._stop_server()
        shutil.rmtree(self.dir, ignore_errors=True)


class Session:
    """One long-lived psql connection, for statements that must interleave with other
    sessions' (open transactions, lock waits). Named by application_name."""

    END = "__leasegate_end__"

    def __init__(self, pg, name):
        self.name = name
        self.proc = subprocess.Popen(
            [os.path.join(PG_BIN, "psql"), "-X", "-q", "-A", "-t", "-F", "\t", "-v", "VERBOSITY=terse"],
            env=pg.env(app=name), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1)
        self._lines = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.pending = False

    def _read(self):
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def send(self, sql):
        """Starts sql (one or more statements) without waiting for its end."""
        assert not self.pending, "session %s: the previous statement is still running" % self.name
        self.proc.stdin.write(sql.rstrip().rstrip(";") + ";\n\\echo " + self.END + "\n")
        self.proc.stdin.flush()
        self.pending = True

    def result(self, errors_ok=False, timeout=SQL_TIMEOUT_S):
        """The rows of what send() started; SqlError on an ERROR unless errors_ok (then the
        ERROR lines are returned as rows of one string)."""
        rows, error = [], None
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("session %s: no answer within %.0f s" % (self.name, timeout))
            if line is None:
                raise AssertionError("session %s: psql ended" % self.name)
            if line == self.END:
                break
            if line.startswith("ERROR:"):
                error = error or line[len("ERROR:"):].strip()
                rows.append([line])
            elif line:
                rows.append(line.split("\t"))
        self.pending = False
        if error and not errors_ok:
            raise SqlError(error)
        return rows

    def run(self, sql, errors_ok=False):
        self.send(sql)
        return self.result(errors_ok=errors_ok)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
        self._reader.join(STOP_TIMEOUT_S)
        self.proc.stdout.close()


def main():
    problems = [p for p in (missing_server(), missing_python(), missing_node()) if p]
    for p in problems:
        print("SQL fencing tests cannot run in full: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
