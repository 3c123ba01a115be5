"""The service part of scripts/bench (`--only service`): what a Rust service gets from
lockctl-core, measured side by side in one run on this machine.

1. The reference shop (`examples/shop.rs`, batch by default) against the tutorial's
   run_demo.php under `PHP_CLI_SERVER_WORKERS=10 php -S`, both on one private redis-server,
   both measured by `lockctl hammer --url --preset tutorial` at the same -c (10 and 50), with
   stock for half the requests: requests/s, purchases/s and p99, in turns, median round.
2. Waiting buyers as tasks: the hammer's `lock` and `fenced` at c=10 and c=10,000 (above 16
   buyers they are tasks, a few of them waiting in Redis), in turns, median round.

The section it writes replaces the one under HEADING in BENCHMARKS.md (or is appended).
"""

import datetime
import os
import statistics
import subprocess
import sys
import tempfile

import bench_http
from bench_http import free_port, run_lockctl, start_php, start_redis, stop, wait_port

HEADING = "## A Rust service on lockctl-core (the shop, tasks)"


def start_shop(shop, tmp, redis_port):
    port = free_port()
    log = os.path.join(tmp, "shop.log")
    proc = subprocess.Popen(
        [shop, "--listen", f"127.0.0.1:{port}", "--redis", f"redis://127.0.0.1:{redis_port}"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT)
    wait_port(port, proc, "the shop", log)
    return proc, port


def sale(lockctl, redis_url, url, c, n, sku):
    """One judged sale at `url`: n requests, c at a time, stock for half of them."""
    cmd, rps, _, report = run_lockctl(
        lockctl, redis_url, url, c, n,
        ["--preset", "tutorial", "--sku", sku, "--stock", str(n // 2)])
    elapsed = max(report["elapsed_s"], 1e-9)
    return {
        "cmd": cmd.replace(url, f"'{url}'"),
        "rps": rps,
        "pps": report["bought"] / elapsed,
        "p99": report["latency_ms"]["p99"],
        "busy": report["busy"],
        "bought": report["bought"],
        "verdict": report["verdict"],
    }


def in_turns(repeat, runs):
    """Each of `runs` (name -> callable) once a round, the order reversed every other round;
    per name, every round's result."""
    out = {name: [] for name in runs}
    for r in range(repeat):
        order = list(runs.items()) if r % 2 == 0 else list(reversed(runs.items()))
        for name, run in order:
            res = run()
            out[name].append(res)
            print(f"  round {r + 1}: {name:<22} {res.get('rps', 0):>10.1f} requests/s "
                  f"{res.get('pps', 0):>10.1f} purchases/s", file=sys.stderr)
    return out


def median_of(results, key):
    return statistics.median(r[key] for r in results)


def shop_rows(lockctl, shop, quick, repeat, tmp):
    redis, redis_port = start_redis(tmp)
    php, php_port = start_php(tmp, redis_port, 10)
    served, shop_port = start_shop(shop, tmp, redis_port)
    redis_url = f"redis://127.0.0.1:{redis_port}"
    try:
        urls = {
            "php": f"http://127.0.0.1:{php_port}/run_demo.php?sku={{sku}}",
            "shop": f"http://127.0.0.1:{shop_port}/buy?sku={{sku}}&order={{order}}",
        }
        n = 2000 if quick else 10000
        table = {}
        for c in (10, 50):
            runs = {f"{name} c={c}": (lambda u=u, name=name: sale(lockctl, redis_url, u, c, n,
                                                                   f"bench_{name}"))
                    for name, u in urls.items()}
            table.update(in_turns(repeat, runs))
        return table, n
    finally:
        stop(served)
        stop(php)
        stop(redis)


def hammer(lockctl, redis_url, strategy, c, n):
    # A wait long enough for the last of 10,000 waiting buyers at a few thousand purchases a
    # second (10,000 / 2,000/s = 5 s, the default, on a busy spell): the rows measure the
    # rate, and a buyer turned away busy here waited the whole minute.
    argv = [lockctl, "--redis", redis_url, "hammer", "--json", "--strategy", strategy,
            "-n", str(n), "-c", str(c), "--stock", str(n), "--sku", f"tasks_{strategy}",
            "--wait-ms", "60000"]
    import json
    out = subprocess.run(argv, capture_output=True, text=True)
    report = json.loads(out.stdout)
    return {
        "cmd": " ".join(argv).replace(lockctl, "lockctl"),
        "rps": report["throughput_rps"],
        "pps": report["bought"] / max(report["elapsed_s"], 1e-9),
        "busy": report["busy"],
        "errors": report["errors"],
        "verdict": report["verdict"],
        "rss": report.get("client_max_rss_mb"),
    }


def task_rows(lockctl, quick, repeat, tmp):
    redis, redis_port = start_redis(tmp)
    redis_url = f"redis://127.0.0.1:{redis_port}"
    try:
        n = 10000 if quick else 30000
        runs = {f"{s} c={c}": (lambda s=s, c=c: hammer(lockctl, redis_url, s, c, n))
                for s in ("lock", "fenced") for c in (10, 10000)}
        return in_turns(repeat, runs), n
    finally:
        stop(redis)


def run(lockctl, shop, quick, repeat):
    """Both parts; returns the section of BENCHMARKS.md."""
    with tempfile.TemporaryDirectory() as tmp:
        print("service: the shop against the tutorial's PHP", file=sys.stderr)
        shops, n = shop_rows(lockctl, shop, quick, repeat, tmp)
        print("service: waiting buyers as tasks", file=sys.stderr)
        tasks, tn = task_rows(lockctl, quick, repeat, tmp)
    php_v = subprocess.run(["php", "-v"], capture_output=True, text=True).stdout.split("\n")[0]
    lines = [HEADING, ""]
    w = lines.append
    w(f"Produced by `scripts/bench --only service` on {datetime.date.today().isoformat()}: "
      f"{os.cpu_count()} cores, loopback, release build, one private redis-server; {php_v}. "
      f"Every row ran {repeat} times, in turns with the rows it is compared with (the order "
      "reversed every other round), so that a busy spell on this shared machine hits them "
      "alike; each figure is the median round, and every round is listed.")
    w("")
    w("### The reference shop against the tutorial's PHP")
    w("")
    w(f"Both endpoints measured by `lockctl hammer --url --preset tutorial`, {n:,} requests a "
      f"run with stock for {n // 2:,} (half the requests), at the same -c. The shop: "
      "`examples/shop.rs` with its defaults (batch, on one tokio thread). The PHP: "
      "`examples/tutorial-php/run_demo.php` under `PHP_CLI_SERVER_WORKERS=10 php -S`, which "
      "turns a buyer away busy whenever its lock is taken.")
    w("")
    w("| endpoint | -c | requests/s | purchases/s | p99 ms | busy | verdicts | requests/s, every round |")
    w("|---|---:|---:|---:|---:|---:|---|---|")
    for c in (10, 50):
        for name in ("php", "shop"):
            rs = shops[f"{name} c={c}"]
            verdicts = ", ".join(sorted(set(r["verdict"] for r in rs)))
            w(f"| {name} | {c} | {median_of(rs, 'rps'):,.0f} | {median_of(rs, 'pps'):,.0f} | "
              f"{median_of(rs, 'p99'):.2f} | {median_of(rs, 'busy'):,.0f} | {verdicts} | "
              + ", ".join(f"{r['rps']:,.0f}" for r in rs) + " |")
    w("")
    php50, shop50 = shops["php c=50"], shops["shop c=50"]
    rps_x = statistics.median(s["rps"] / p["rps"] for s, p in zip(shop50, php50))
    pps_x = statistics.median(s["pps"] / max(p["pps"], 1e-9) for s, p in zip(shop50, php50))
    p99_lower = sum(s["p99"] < p["p99"] for s, p in zip(shop50, php50))
    met = lambda ok: "met" if ok else "NOT met"
    w(f"At c=50 the shop reached {rps_x:.1f}x the PHP's requests/s (target at least 3x: "
      f"{met(rps_x >= 3)}) and {pps_x:.1f}x its purchases/s (target at least 10x: "
      f"{met(pps_x >= 10)}); its p99 was lower in {p99_lower} of {len(shop50)} rounds "
      f"(target: lower, {met(p99_lower == len(shop50))}). Medians of the per-round ratios.")
    w("")
    w("### Waiting buyers are tasks: lock and fenced at c=10 and c=10,000")
    w("")
    w(f"`lockctl hammer --strategy S -n {tn:,} --stock {tn:,} --wait-ms 60000` (a wait long "
      "enough for the last of 10,000 waiting buyers on a slow spell; a buyer turned away busy "
      "would have waited the whole minute). Above 16 buyers (`lockctl_core::aio::DEFAULT_ROOM`), the buyers are tasks: 16 "
      "wait for the lock in Redis, the rest wait for a place in this process, in order.")
    w("")
    w("| strategy | -c | purchases/s | busy | errors | client RSS MB | verdicts | purchases/s, every round |")
    w("|---|---:|---:|---:|---:|---:|---|---|")
    for s in ("lock", "fenced"):
        for c in (10, 10000):
            rs = tasks[f"{s} c={c}"]
            verdicts = ", ".join(sorted(set(r["verdict"] for r in rs)))
            w(f"| {s} | {c:,} | {median_of(rs, 'pps'):,.0f} | {max(r['busy'] for r in rs)} | "
              f"{max(r['errors'] for r in rs)} | {median_of(rs, 'rss') or 0:.0f} | {verdicts} | "
              + ", ".join(f"{r['pps']:,.0f}" for r in rs) + " |")
    w("")
    for s in ("lock", "fenced"):
        ratio = statistics.median(w_["pps"] / t["pps"] for w_, t in
                                  zip(tasks[f"{s} c=10000"], tasks[f"{s} c=10"]))
        w(f"- {s}: c=10,000 reached {ratio:.2f}x its own c=10 rate (target at least 0.7x: "
          f"{met(ratio >= 0.7)}); busy at most "
          f"{max(r['busy'] for r in tasks[f'{s} c=10000'])} (target 0: nobody turned away "
          "while within the wait).")
    w("")
    w("Before (commit 8625681, a thread and a connection per buyer, measured here the same "
      "day): `lock` at c=5,000, 20,000 requests, --wait-ms 60000: 91.5 purchases/s, 12,087 "
      "turned away busy; c=10,000 was refused (10,004 connections needed, maxclients 10,000).")
    w("")
    w("Commands (ports are free ones picked per run):")
    w("")
    w("```")
    for table in (shops, tasks):
        for rs in table.values():
            w(rs[0]["cmd"])
    w("```")
    w("")
    return "\n".join(lines)


def write_section(path, section, heading=HEADING):
    """Replaces the section under `heading` in `path` (up to the next `## `), or puts it before
    the HTTP part (which `--only http` rewrites whole), or at the end."""
    text = open(path).read() if os.path.exists(path) else ""
    start = text.find(heading)
    http = text.find(bench_http.HEADING)
    if start < 0 and http >= 0:
        text = text[:http] + section.rstrip("\n") + "\n\n" + text[http:]
    elif start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + section.rstrip("\n") + "\n" + (text[end:] if end >= 0 else "")
    with open(path, "w") as f:
        f.write(text)


def ensure_tools():
    bench_http.ensure_tools()
