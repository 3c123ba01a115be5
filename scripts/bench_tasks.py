"""Speed from async code (`scripts/bench --only tasks`): issue 44's targets, side by side.

On one private redis-server, in rounds (each round runs every row once, the order turning, so a
busy spell on this shared machine hits them alike):
- the references: redis-benchmark -c 50 sending EVALSHA of a minimal GET+DECRBY script (what
  one script call per purchase can reach at that concurrency), one client's PING (what a lock
  hand-off's round trips can reach), and the minimal script pipelined as the tasks driver sends;
- `hammer --strategy atomic -c 50` on threads and on tokio tasks, `batch -c 50`, `lock -c 10`
  on threads and on tasks, and `lock` on tasks at c=10,000 with the hammer's peak memory.
Each row shows the median over the rounds, and its ratio to its reference in the same round.

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

HEADING = "## Speed from async code: issue 44's targets side by side"

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


def hammer(lockctl, port, mode, n, sku, strategy="atomic", clients=50):
    """One `hammer --json` run; (command shown, report, peak RSS in MB of the hammer)."""
    argv = [lockctl, "--redis", f"redis://127.0.0.1:{port}", "hammer", "--json",
            "--sku", sku, "--strategy", strategy, "--mode", mode,
            "-n", str(n), "-c", str(clients), "--stock", str(n), "--wait-ms", "60000"]
    with tempfile.TemporaryFile("w+") as errf:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errf, text=True)
        out = proc.stdout.read()
        # Reaped here, for this child's own peak resident memory (ru_maxrss, in KiB).
        _, _, usage = os.wait4(proc.pid, 0)
        proc.returncode = 0
        errf.seek(0)
        err = errf.read()
    peak_mb = usage.ru_maxrss / 1024
    if not out.strip():
        sys.exit(f"{' '.join(argv)} printed nothing: {err}")
    report = json.loads(out)
    if report["verdict"] != "pass":
        sys.exit(f"{' '.join(argv)}: verdict {report['verdict']}")
    shown = "lockctl " + " ".join(argv[3:]).replace(f"--sku {sku} ", "")
    return shown, report, peak_mb


def ping(port, n):
    """redis-benchmark PING from one client; (command, requests/s)."""
    argv = ["redis-benchmark", "-p", str(port), "-c", "1", "-n", str(n), "-q", "ping"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    last = out.replace("\r", "\n").strip().splitlines()[-1]
    return " ".join(argv), float(re.search(r"([\d.]+) requests per second", last).group(1))


def usec_per_call(port):
    """INFO commandstats' evalsha µs per call since the last CONFIG RESETSTAT."""
    stats = cli(port, "info", "commandstats")
    m = re.search(r"cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)", stats)
    return (int(m.group(1)), float(m.group(3))) if m else (0, None)


def server_cpu_s(pid):
    """The redis-server's CPU time so far (user + system), in seconds, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def aio_bench(example, port, strategy, n, clients):
    """One round of examples/aio_bench for `strategy`: (command, blocking/s, async/s)."""
    argv = [example, str(n), str(clients), "1", strategy]
    env = dict(os.environ, REDIS_URL=f"redis://127.0.0.1:{port}")
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout
    m = re.search(r"round 0: blocking (\d+)/s, async (\d+)/s", out)
    if not m:
        sys.exit(f"{' '.join(argv)} printed no round: {out}")
    shown = f"REDIS_URL=redis://127.0.0.1:PORT examples/aio_bench {n} {clients} 1 {strategy}"
    return shown, float(m.group(1)), float(m.group(2))


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


# The rows, each run once a round: (key, what it is, how it runs, what its ratio is to).
ROWS = [
    ("ref", "redis-benchmark -c 50, EVALSHA of a minimal GET+DECRBY script", None, None),
    ("threads", "`hammer --strategy atomic -c 50` (threads, multiplexed driver)",
     ("threads", "atomic", 50), "ref"),
    ("tasks", "`hammer --mode tasks --strategy atomic -c 50` (native async)",
     ("tasks", "atomic", 50), "ref"),
    ("batch", "`hammer --strategy batch -c 50` (group commit)", ("threads", "batch", 50), "ref"),
    ("ping1", "redis-benchmark -c 1 PING: one client's round trips", None, None),
    ("lock", "`hammer --strategy lock -c 10` (threads)", ("threads", "lock", 10), "ping1"),
    ("lock_tasks", "`hammer --mode tasks --strategy lock -c 10`", ("tasks", "lock", 10),
     "ping1"),
    ("lock_10k", "`hammer --mode tasks --strategy lock -c 10000`", ("tasks", "lock", 10000),
     "lock_tasks"),
    ("ref_p", "redis-benchmark -c 2 -P 25, the minimal script: 50 in flight on 2 connections, "
     "the tasks driver's shape", None, "ref"),
    ("aio_blk", "`examples/aio_bench` atomic, 50 threads: the blocking `Buyer`", None, None),
    ("aio", "`examples/aio_bench` atomic, 50 tasks: `AsyncBuyer` (native)", None, "aio_blk"),
    ("aio_lock_blk", "`examples/aio_bench` lock, 10 threads: the blocking `Buyer`", None, None),
    ("aio_lock", "`examples/aio_bench` lock, 10 tasks: `AsyncBuyer` (native)", None,
     "aio_lock_blk"),
]


def purchases(strategy, quick):
    n = {"atomic": 150000, "batch": 300000, "lock": 20000}[strategy]
    return n // 10 if quick else n


def run(lockctl, quick, repeat, free_port):
    example = os.path.join(os.path.dirname(lockctl), "examples", "aio_bench")
    if not os.path.exists(example):
        sys.exit(f"{example} is missing: cargo build --release --examples")
    n_aio = 20000 if quick else 200000
    n_ref = 30000 if quick else 300000
    n_ping = 5000 if quick else 50000
    rows = {key: [] for key, _, _, _ in ROWS}
    commands = {}
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_redis(tmp, free_port)
        try:
            version = re.search(r"redis_version:(\S+)", cli(port, "info", "server")).group(1)
            sha = cli(port, "script", "load", MINIMAL)
            cli(port, "set", "ref:stock", "1000000000000")
            how_of = {key: how for key, _, how, _ in ROWS}
            for r in range(repeat):
                # The order turns each round, so that no row always runs first.
                keys = [key for key, _, _, _ in ROWS]
                turn = r * 3 % len(keys)
                for key in keys[turn:] + keys[:turn]:
                    if key == "ref":
                        commands[key], rps = reference(port, sha, n_ref)
                        rows[key].append((rps, None, None))
                    elif key == "ref_p":
                        commands[key], rps = reference(port, sha, n_ref, 2, 25)
                        rows[key].append((rps, None, None))
                    elif key == "ping1":
                        commands[key], rps = ping(port, n_ping)
                        rows[key].append((rps, None, None))
                    elif key in ("aio_blk", "aio_lock_blk"):
                        # Run with its async twin, in one aio_bench run.
                        continue
                    elif key in ("aio", "aio_lock"):
                        strategy, clients = ("atomic", 50) if key == "aio" else ("lock", 10)
                        commands[key], blk, asy = aio_bench(example, port, strategy, n_aio,
                                                            clients)
                        rows[key + "_blk"].append((blk, None, None))
                        rows[key].append((asy, None, None))
                    else:
                        mode, strategy, clients = how_of[key]
                        cpu_before = server_cpu_s(proc.pid)
                        commands[key], rep, peak = hammer(
                            lockctl, port, mode, purchases(strategy, quick), f"bench_{key}_{r}",
                            strategy, clients)
                        cpu = server_cpu_s(proc.pid) - cpu_before
                        rep["server_cpu_us"] = cpu * 1e6 / max(rep["requests"], 1)
                        rep["server_busy"] = cpu / max(rep["elapsed_s"], 1e-9)
                        rows[key].append((rep["throughput_rps"], rep, peak))
                    print(f"round {r}: {key:10} {rows[key][-1][0]:>10,.0f}/s", file=sys.stderr)
            # The server's share: each kind of call alone, its µs per call.
            server = {}
            cli(port, "config", "resetstat")
            reference(port, sha, n_ref // 3)
            server["ref"] = usec_per_call(port)
            for what in ("threads", "tasks"):
                cli(port, "config", "resetstat")
                hammer(lockctl, port, what, purchases("atomic", quick) // 3,
                       f"bench_{what}_stats")
                server[what] = usec_per_call(port)
        finally:
            proc.kill()
            proc.wait()

    def ratio(key, to):
        return median([x[0] / ref[0] for x, ref in zip(rows[key], rows[to])])

    lines = []
    w = lines.append
    w(HEADING)
    w("")
    w(f"Produced by `scripts/bench --only tasks{' --quick' if quick else ''}` on "
      f"{time.strftime('%Y-%m-%d')}: {os.cpu_count()} cores, redis-server {version} started by "
      f"the script, loopback, {repeat} rounds each running every row once (the order turning "
      "each round); each row is the median over the rounds, its ratio the median of its runs "
      "over its reference's run of the same round. Every hammer run sold its whole stock "
      "(`--stock` = `-n`) and was verified from Redis (verdict PASS, or the bench stops).")
    w("")
    w("| what | purchases/s (median) | each round | ratio | to | p99 ms | "
      "client CPU µs/purchase | server CPU µs/purchase | server busy | peak RSS MB |")
    w("|---|---:|---|---:|---|---:|---:|---:|---:|---:|")
    for key, name, _, to in ROWS:
        got = rows[key]
        mid = sorted(got, key=lambda x: x[0])[len(got) // 2]
        each = ", ".join(f"{x[0]:,.0f}" for x in got)
        rep, peak = mid[1], mid[2]
        p99 = rep["latency_ms"]["p99"] if rep else "-"
        cpu = rep.get("client_cpu_us_per_request") if rep else None
        r = f"{ratio(key, to):.2f}" if to else "1.00"
        scpu = f"{rep['server_cpu_us']:.1f}" if rep else "-"
        busy = f"{rep['server_busy']:.0%}" if rep else "-"
        w(f"| {name} | {mid[0]:,.0f} | {each} | {r} | {key if not to else to} | {p99} | "
          f"{cpu if cpu is not None else '-'} | {scpu} | {busy} | "
          f"{f'{peak:.0f}' if peak else '-'} |")
    w("")
    w("The `to` column names the row each ratio is to (`ref`: the minimal script at c=50; "
      "`ping1`: one client's PING; `lock_tasks`: the same strategy at c=10; `aio_blk` and "
      "`aio_lock_blk`: the blocking `Buyer` in the same `aio_bench` run). The server columns "
      "are the redis-server's own CPU time (user + system, from /proc) over the run, per "
      "purchase and as a share of one core: its one command thread at 100% is the server's "
      "cap. The tasks driver "
      "keeps its 50 in flight on 2 connections, so the server reads many calls per read, as "
      "with redis-benchmark's `-P`: its ratio to `ref` can pass 1, and `ref_p`, the same shape, "
      "is the ceiling it is up against.")
    w("")
    peak_10k = max(x[2] for x in rows["lock_10k"])
    w("Issue 44's targets, from these rounds:")
    w("")
    w(f"- `hammer --strategy atomic -c 50`: {ratio('threads', 'ref'):.2f}x the minimal script "
      f"(target: at least 0.8x); in tasks mode {ratio('tasks', 'ref'):.2f}x.")
    w(f"- `hammer --strategy lock -c 10`: {ratio('lock', 'ping1'):.2f}x one client's PING "
      f"(target: at least 0.6x); in tasks mode {ratio('lock_tasks', 'ping1'):.2f}x.")
    w(f"- `batch -c 50`: {ratio('batch', 'ref'):.2f}x the minimal script (target: at least "
      "2.5x).")
    w(f"- `hammer --mode tasks --strategy lock -c 10000`: PASS in every round, "
      f"{ratio('lock_10k', 'lock_tasks'):.2f}x its c=10 rate (target: at least 0.8x), peak "
      f"RSS at most {peak_10k:.0f} MB over the rounds (target: under 200 MB).")
    w(f"- `aio` atomic with 50 tasks: {median([x[0] for x in rows['aio']]):,.0f} purchases/s, "
      f"{ratio('aio', 'aio_blk'):.2f}x the blocking `Buyer` in the same runs (target: at least "
      "1.5x the issue's 71k/s, which was 1.69x the blocking one's 42k/s on its day); "
      f"{median([x[0] / 71000 for x in rows['aio']]):.2f}x that 71k/s, a figure of another "
      "day on a machine whose speed moves 2x between hours.")
    w(f"- `aio` lock with 10 tasks (native) against 10 threads: "
      f"{ratio('aio_lock', 'aio_lock_blk'):.2f}x.")
    w(f"- Tasks against threads under atomic, the same rounds: "
      f"{median([t[0] / h[0] for t, h in zip(rows['tasks'], rows['threads'])]):.2f}x.")
    w("")
    w("The server's time per script call (`INFO commandstats`, `usec_per_call` of `evalsha`, "
      "after `CONFIG RESETSTAT`, one run of each alone; by kind of purchase in \"The deduct "
      "script on the server, part by part\"):")
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
    for key, _, _, _ in ROWS:
        if key in commands:
            w(commands[key])
    w("```")
    w("")
    return "\n".join(lines)
