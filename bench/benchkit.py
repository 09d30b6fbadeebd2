"""Helpers the Python benchmarks share: the vantage binary, free ports, the REST API,
waiting for a server, child processes with logs, a fresh archive on either backend, and
/proc readings. Not a benchmark itself (scripts/test runs only the executable files of
bench/)."""

import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def vantage_bin():
    """VANTAGE_BIN, or the release build (built here when VANTAGE_BIN is unset, for the whole
    workspace as the tests build it: `-p` would rebuild the dependencies with one crate's features)."""
    explicit = os.environ.get("VANTAGE_BIN")
    if explicit:
        return explicit
    subprocess.run(["cargo", "build", "--release", "-q", "--workspace", "--bins"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target", "release", "vantage")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Api:
    """The server's REST API with one bearer token."""

    def __init__(self, url, token, timeout_s=60):
        self.url = url
        self.token = token
        self.timeout_s = timeout_s

    def call(self, method, path, body=None, token=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", "Bearer " + (token or self.token))
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return json.load(response)


def wait_until_up(url, process=None, limit_s=30, log=None):
    """Waits for GET /healthz to answer; exits with the log's name when the server
    exits or does not answer within limit_s."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if time.monotonic() > deadline or (process is not None and process.poll() is not None):
            where = f"; see {log}" if log else ""
            sys.exit(f"server at {url} did not come up within {limit_s} s{where}")
        time.sleep(0.2)


class Processes:
    """Child processes, each logging to a file in `directory`; stopped together
    (SIGTERM, then SIGKILL after 15 s)."""

    def __init__(self, directory):
        self.directory = directory
        self.processes = []
        self.logs = []

    def spawn(self, args, log_name, env=None):
        log = open(os.path.join(self.directory, log_name), "w")
        self.logs.append(log)
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.processes.append(process)
        return process

    def stop_all(self):
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in self.logs:
            log.close()
        self.processes, self.logs = [], []


PG_BASE = "postgres://postgres@127.0.0.1:5432/test"


def psql(sql, capture=False):
    """Runs SQL on the local PostgreSQL (scripts/install-deps sets it up); the statement
    goes on stdin, as bulk VALUES lists exceed the argument size limit."""
    answer = subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-v", "ON_ERROR_STOP=1",
                             "-q", "-At", "-c", "SET client_min_messages TO warning", "-f", "-"],
                            input=sql, check=True, capture_output=True, text=True)
    return answer.stdout if capture else None


class Archive:
    """A fresh archive for a server under test: a SQLite file in `directory`, or a
    PostgreSQL schema of its own (dropped by cleanup); `url` is the server's --db."""

    def __init__(self, kind, directory, label):
        self.kind = kind
        if kind == "sqlite":
            self.path = os.path.join(directory, f"{label}.db")
            self.url = f"sqlite://{self.path}"
        elif kind == "postgres":
            self.schema = f"vt_{label}_{os.getpid()}_{random.randrange(1 << 30)}"
            psql(f"CREATE SCHEMA {self.schema}")
            self.url = f"{PG_BASE}?options=-c%20search_path%3D{self.schema}"
        else:
            raise ValueError(f"unknown archive backend '{kind}' (sqlite or postgres)")

    def execute_script(self, sql):
        if self.kind == "sqlite":
            with sqlite3.connect(self.path, timeout=60) as db:
                db.executescript(sql)
        else:
            psql(f"SET search_path TO {self.schema}; {sql}")

    def rows(self, sql):
        """The rows of a query, read only (as tuples; PostgreSQL's as strings)."""
        if self.kind == "sqlite":
            with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=60) as db:
                return db.execute(sql).fetchall()
        text = psql(f"SET search_path TO {self.schema}; {sql}", capture=True)
        return [tuple(line.split("|")) for line in text.splitlines() if line]

    def cleanup(self):
        if self.kind == "postgres":
            psql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")


def cpu_seconds(pid):
    """CPU time (user + system) of a process, in seconds."""
    # Fields after the command name: utime and stime are the 12th and 13th.
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid, key):
    """A kB field of /proc/PID/status (VmRSS:, VmHWM:, Threads:), or None once the
    process is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(key):
                    return int(line.split()[1])
    except FileNotFoundError:
        return None
    raise KeyError(f"no {key} in /proc/{pid}/status")
