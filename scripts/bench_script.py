"""The deduct script's cost on the server, part by part (`scripts/bench --only script`), issue 44.

Every atomic, fenced and batched purchase is one call of lockctl's deduct script
(crates/lockctl-core/src/stock/lua/books.lua, then lua/deduct.lua, the text lockctl sends). Here
redis-benchmark sends that script straight to a private redis-server with the arguments of each
kind of purchase, and `INFO commandstats` (after `CONFIG RESETSTAT`) gives the server's µs per
call of each:
- the minimal GET+DECRBY script, the floor one script call per purchase stands on;
- a purchase as `hammer` makes it (no per-user limit, no queue): bought, and sold out;
- with a per-user limit (a user and a limit: the buyer's total read and added to);
- with the orders queue (`--queue`: the order appended to a stream in the same script);
- an order id sent again (answered from the ledger), and one that finds the lock held (busy).
Each kind is measured for the script as it is in the working tree and for the slimmer variant
tried for issue 44 (`VARIANT`, a commit of its own, not kept: it read only what each answer needs
and wrote the ledger entry with HSETNX, one call fewer on the common paths), in turns, `repeat`
rounds; each cell is the median, each ratio the median of the rounds' ratios.
"""

import os
import re
import subprocess
import tempfile
import time

from bench_tasks import cli, start_redis, usec_per_call

HEADING = "## The deduct script on the server, part by part"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LUA = "crates/lockctl-core/src/stock/lua"
# The slimmer variant of the deduct script tried for issue 44 and not kept, measured beside the
# working tree's.
VARIANT = "4a9cce6"

MINIMAL = ("local v = tonumber(redis.call('GET', KEYS[1])) "
           "if v and v >= tonumber(ARGV[1]) then return redis.call('DECRBY', KEYS[1], ARGV[1]) end "
           "return -1")

SKU = "b"
KEYS = [f"item:stock:{SKU}", f"item:orders:{SKU}", f"dist_lock:{SKU}", f"item:buyers:{SKU}",
        f"item:sold:{SKU}", f"item:order_events:{SKU}"]


def script_text(rev=None):
    """books.lua then deduct.lua, as lockctl sends them: from the working tree, or at `rev`."""
    def read(name):
        if rev is None:
            return open(os.path.join(ROOT, LUA, name)).read()
        return subprocess.run(["git", "show", f"{rev}:{LUA}/{name}"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
    return read("books.lua") + read("deduct.lua")


def args(holder="", order="o__rand_int__", user="", limit="0", queue="0"):
    """The deduct script's ARGV (HOLDER, QTY, ORDER, USER, LIMIT, QUEUE, FENCE, SKU)."""
    return [holder, "1", order, user, limit, queue, "", SKU]


# What each kind of purchase sends, and the state it needs first (redis-cli commands).
KINDS = [
    ("bought, no limit, no queue (hammer's purchase)", args(), [["SET", KEYS[0], "1000000000"]]),
    ("sold out, no limit, no queue", args(), [["SET", KEYS[0], "0"]]),
    ("bought, with a per-user limit", args(user="u__rand_int__", limit="1000000"),
     [["SET", KEYS[0], "1000000000"]]),
    ("bought, with the orders queue", args(queue="1"), [["SET", KEYS[0], "1000000000"]]),
    ("an order id sent again (replayed)", args(order="o-again"),
     [["SET", KEYS[0], "1000000000"], ["HSET", KEYS[1], "o-again", "1"]]),
    ("the lock held by another client (busy)", args(),
     [["SET", KEYS[0], "1000000000"], ["SET", KEYS[2], "someone"]]),
]


def server_us(port, sha, numkeys, keys, argv, setup, n):
    """The server's µs per EVALSHA call of `sha` over `n` calls from redis-benchmark -c 10."""
    cli(port, "flushall")
    for c in setup:
        cli(port, *c)
    cli(port, "config", "resetstat")
    subprocess.run(["redis-benchmark", "-p", str(port), "-c", "10", "-n", str(n), "-q",
                    "-r", "100000000", "EVALSHA", sha, str(numkeys), *keys, *argv],
                   check=True, capture_output=True)
    calls, us = usec_per_call(port)
    if calls != n:
        raise SystemExit(f"commandstats counted {calls} calls, not {n}")
    return us


def answer(port, sha, keys, argv, setup):
    """What one call of the kind answers (its status), after its set-up."""
    cli(port, "flushall")
    for c in setup:
        cli(port, *c)
    argv = [a.replace("__rand_int__", "1") for a in argv]
    return cli(port, "evalsha", sha, str(len(keys)), *keys, *argv).splitlines()[0]


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def run(quick, repeat, free_port):
    n = 20000 if quick else 100000
    scripts = {"now": script_text(), "base": script_text(VARIANT)}
    cells = {}
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_redis(tmp, free_port)
        try:
            version = re.search(r"redis_version:(\S+)", cli(port, "info", "server")).group(1)
            shas = {k: cli(port, "script", "load", v) for k, v in scripts.items()}
            minimal = cli(port, "script", "load", MINIMAL)
            answers = {}
            for name, argv, setup in KINDS:
                for which, sha in shas.items():
                    answers[(name, which)] = answer(port, sha, KEYS, argv, setup)
            for r in range(repeat):
                cells.setdefault(("minimal", "now"), []).append(
                    server_us(port, minimal, 1, ["ref:stock"], ["1"],
                              [["SET", "ref:stock", "1000000000"]], n))
                for name, argv, setup in KINDS:
                    order = ["now", "base"] if r % 2 == 0 else ["base", "now"]
                    for which in order:
                        cells.setdefault((name, which), []).append(
                            server_us(port, shas[which], len(KEYS), KEYS, argv, setup, n))
        finally:
            proc.kill()
            proc.wait()
    base_commit = VARIANT
    lines = [HEADING, ""]
    w = lines.append
    w(f"Produced by `scripts/bench --only script{' --quick' if quick else ''}` on "
      f"{time.strftime('%Y-%m-%d')}: redis-server {version} started by the script, "
      f"redis-benchmark -c 10 sending {n:,} calls of each kind straight to the script (no "
      "lockctl in between), `INFO commandstats` after `CONFIG RESETSTAT` giving the server's µs "
      f"per call; {repeat} rounds, the script of the working tree and the slimmer variant of "
      f"{base_commit} (not kept) in turns, each cell the median.")
    w("")
    floor = median(cells[("minimal", "now")])
    w(f"The floor, the minimal GET+DECRBY script: {floor:.2f} µs per call.")
    w("")
    w(f"| purchase | answer | µs per call, lockctl's script | µs per call, the variant of "
      f"{base_commit} | variant/script (median of the rounds) | script over the floor |")
    w("|---|---|---:|---:|---:|---:|")
    for name, _, _ in KINDS:
        now, base = median(cells[(name, "now")]), median(cells[(name, "base")])
        # The two scripts ran side by side in each round: the ratio is the median of the
        # rounds' ratios, which a busy spell shared by both does not move.
        ratio = median([b / a for a, b in zip(cells[(name, "now")], cells[(name, "base")])])
        said = answers[(name, "now")]
        if said != answers[(name, "base")]:
            said += f" (the variant: {answers[(name, 'base')]})"
        w(f"| {name} | {said} | {now:.2f} | {base:.2f} | {ratio:.2f} | "
          f"{now / floor:.2f} |")
    w("")
    w("Command (the minimal script's with `1 ref:stock 1`; `<sha>` the script loaded, ARGV as "
      "each kind needs):")
    w("")
    w("```")
    w(f"redis-benchmark -p PORT -c 10 -n {n} -q -r 100000000 EVALSHA <sha> {len(KEYS)} "
      f"{' '.join(KEYS)} '' 1 o__rand_int__ '' 0 0 '' {SKU}")
    w("```")
    w("")
    return "\n".join(lines)
