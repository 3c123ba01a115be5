"""The atomic purchase from async code (`scripts/bench --only tasks`), issue 44.

Side by side on one private redis-server, in rounds (each round runs every row once, so a busy
spell on this shared machine hits them alike):
- the reference: redis-benchmark -c 50 sending EVALSHA of a minimal GET+DECRBY script, what one
  script call per purchase can reach at that concurrency;
- `hammer --strategy atomic -c 50` (threads: the multiplexed driver);
- `hammer --mode tasks --strategy atomic -c 50` (a tokio task per buyer on the native async
  core: a few multiplexed connections, every purchase pipelined on them).
Each row shows the median over the rounds, and its ratio to the reference of its own round.

Then the server's share: `INFO commandstats` (after `CONFIG RESETSTAT`) around one run of each,
for the server's µs per script call: lockctl's deduct script against the minimal one.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

HEADING = "## The atomic purchase from async code (hammer --mode tasks)"

MINIMAL = ("local v = tonumber(redis.call('GET', KEYS[1])) "
           "if v and v >= tonumber(ARGV[1]) then return redis.call('DECRBY', KEYS[1], ARGV[1]) end "
           "return -1")


def start_redis(tmp, free_port):
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", tmp, "--logfile", os.path.join(tmp, "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        if cli(port, "ping", check=False) == "PONG":
            return proc, port
        time.sleep(0.05)
    proc.kill()
    sys.exit("redis-server did not start; log: " + open(os.path.join(tmp, "redis.log")).read())


def cli(port, *args, check=True):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, check=check).stdout.strip()


def reference(port, sha, n, clients=50, pipeline=1):
    """redis-benchmark EVALSHA of the minimal script, `clients` connections each with
    `pipeline` calls in flight; (command, requests/s)."""
    argv = ["redis-benchmark", "-p", str(port), "-c", str(clients), "-n", str(n), "-q",
            *(["-P", str(pipeline)] if pipeline > 1 else []),
            "EVALSHA", sha, "1", "ref:stock", "1"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    last = out.replace("\r", "\n").strip().splitlines()[-1]
    rps = float(re.search(r"([\d.]+) requests per second", last).group(1))
    return " ".join(argv).replace(sha, "<sha of the minimal script>"), rps


def hammer(lockctl, port, mode, n, sku):
    argv = [lockctl, "--redis", f"redis://127.0.0.1:{port}", "hammer", "--json",
            "--sku", sku, "--strategy", "atomic", "--mode", mode,
            "-n", str(n), "-c", "50", "--stock", str(n)]
    out = subprocess.run(argv, capture_output=True, text=True)
    if not out.stdout.strip():
        sys.exit(f"{' '.join(argv)} printed nothing: {out.stderr}")
    report = json.loads(out.stdout)
    if report["verdict"] != "pass":
        sys.exit(f"{' '.join(argv)}: verdict {report['verdict']}")
    shown = "lockctl " + " ".join(argv[3:]).replace(f"--sku {sku} ", "")
    return shown, report


def usec_per_call(port):
    """INFO commandstats' evalsha µs per call since the last CONFIG RESETSTAT."""
    stats = cli(port, "info", "commandstats")
    m = re.search(r"cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)", stats)
    return (int(m.group(1)), float(m.group(3))) if m else (0, None)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def run(lockctl, quick, repeat, free_port):
    n_ref = 30000 if quick else 300000
    n_hammer = 15000 if quick else 150000
    rows = {"ref": [], "threads": [], "tasks": [], "ref_p": []}
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_redis(tmp, free_port)
        try:
            version = re.search(r"redis_version:(\S+)", cli(port, "info", "server")).group(1)
            sha = cli(port, "script", "load", MINIMAL)
            cli(port, "set", "ref:stock", "1000000000000")
            commands = {}
            for r in range(repeat):
                # The order turns each round, so that no row always runs first.
                kinds = ["ref", "threads", "tasks", "ref_p"]
                order = kinds[r % 4:] + kinds[:r % 4]
                for what in order:
                    if what == "ref":
                        commands["ref"], rps = reference(port, sha, n_ref)
                        rows["ref"].append((rps, None))
                    elif what == "ref_p":
                        # The tasks driver's shape: 50 calls in flight on 2 connections.
                        commands["ref_p"], rps = reference(port, sha, n_ref, 2, 25)
                        rows["ref_p"].append((rps, None))
                    else:
                        commands[what], rep = hammer(lockctl, port, what, n_hammer,
                                                     f"bench_{what}_{r}")
                        rows[what].append((rep["throughput_rps"], rep))
                    print(f"round {r}: {what:7} {rows[what][-1][0]:>10,.0f}/s", file=sys.stderr)
            # The server's share: each kind of call alone, its µs per call.
            server = {}
            cli(port, "config", "resetstat")
            reference(port, sha, n_ref // 3)
            server["ref"] = usec_per_call(port)
            for what in ("threads", "tasks"):
                cli(port, "config", "resetstat")
                hammer(lockctl, port, what, n_hammer // 3, f"bench_{what}_stats")
                server[what] = usec_per_call(port)
        finally:
            proc.kill()
            proc.wait()

    def ratio(what):
        return median([x[0] / ref[0] for x, ref in zip(rows[what], rows["ref"])])

    lines = []
    w = lines.append
    w(HEADING)
    w("")
    w(f"Produced by `scripts/bench --only tasks{' --quick' if quick else ''}` on "
      f"{time.strftime('%Y-%m-%d')}: {os.cpu_count()} cores, redis-server {version} started by "
      f"the script, loopback, {repeat} rounds each running every row once (the order turning "
      "each round); each row is the median over the rounds, its ratio the median of its runs "
      "over the reference of the same round.")
    w("")
    w("| what | purchases/s (median) | each round | ratio to the reference | p99 ms | "
      "client CPU µs/purchase |")
    w("|---|---:|---|---:|---:|---:|")
    names = {"ref": "redis-benchmark -c 50, EVALSHA of a minimal GET+DECRBY script",
             "threads": "`hammer --strategy atomic -c 50` (threads, multiplexed driver)",
             "tasks": "`hammer --mode tasks --strategy atomic -c 50` (native async)",
             "ref_p": "redis-benchmark -c 2 -P 25, the same script: 50 in flight on 2 "
                      "connections, the tasks driver's shape"}
    for what in ("ref", "threads", "tasks", "ref_p"):
        got = rows[what]
        mid = sorted(got, key=lambda x: x[0])[len(got) // 2]
        each = ", ".join(f"{x[0]:,.0f}" for x in got)
        rep = mid[1]
        p99 = rep["latency_ms"]["p99"] if rep else "-"
        cpu = rep.get("client_cpu_us_per_request") if rep else None
        r = "1.00" if what == "ref" else f"{ratio(what):.2f}"
        w(f"| {names[what]} | {mid[0]:,.0f} | {each} | {r} | {p99} | "
          f"{cpu if cpu is not None else '-'} |")
    w("")
    w("The reference is one call in flight on each of 50 connections; the tasks driver keeps "
      "its 50 in flight on 2 connections, so the server reads many calls per read, as with "
      "redis-benchmark's `-P`: its ratio to the first reference can pass 1, and the last row, "
      "the same shape, is the ceiling it is up against.")
    w("")
    w(f"Tasks against threads, the same rounds: "
      f"{median([t[0] / h[0] for t, h in zip(rows['tasks'], rows['threads'])]):.2f}x.")
    w("")
    w("The server's time per script call (`INFO commandstats`, `usec_per_call` of `evalsha`, "
      "after `CONFIG RESETSTAT`, one run of each alone):")
    w("")
    w("| calls of | calls | server µs per call |")
    w("|---|---:|---:|")
    for what, label in (("ref", "the minimal GET+DECRBY script"),
                        ("threads", "lockctl's deduct script (threads)"),
                        ("tasks", "lockctl's deduct script (tasks)")):
        calls, us = server[what]
        w(f"| {label} | {calls:,} | {us if us is not None else '-'} |")
    w("")
    w("Commands (`--sku` left out: each run has its own SKU):")
    w("")
    w("```")
    for what in ("ref", "threads", "tasks", "ref_p"):
        w(commands[what])
    w("```")
    w("")
    return "\n".join(lines)
