"""The HTTP part of scripts/bench: `lockctl hammer --url` against wrk and ab, in the same run.

1. Debian's nginx-light (one worker) serves a 3-byte static file on a free loopback port;
   wrk -t1, ab -k (keep-alive), ab (a connection per request) and lockctl fire at it with the
   same 50 connections, in turns, `repeat` rounds; each row is the median round.
2. The tutorial's run_demo.php under `PHP_CLI_SERVER_WORKERS=10 php -S`, on a redis-server of
   the script's own: ab -n 10000 -c 10, as the tutorial does, against lockctl with --preset
   tutorial, which also judges the run.

3. (`run_tls`, `scripts/bench --only https`) the same nginx serving the file over http:// and
   https:// (a CA of the script's own, `--tls-ca`): lockctl both ways in the same rounds, kept
   alive and with a connection per request, for the client's cost of TLS per request.

The static file sells nothing, so lockctl runs there without patterns: every 2xx answer is
counted as answered and the verdict is "nothing to judge" (exit 1), which is the documented
behaviour; the benchmark reads only the throughput.
"""

import datetime
import json
import os
import resource
import re
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HEADING = "## HTTP endpoints (hammer --url)"
TLS_HEADING = "## HTTPS against plain HTTP (hammer --url)"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "examples", "tutorial-php")

# command : Debian package
TOOLS = [("nginx", "nginx-light"), ("wrk", "wrk"), ("ab", "apache2-utils"),
         ("php", "php-cli"), ("redis-server", "redis-server"), ("openssl", "openssl")]


def php_reading(php):
    """What the PHP table's other columns say, from the numbers measured."""
    a, l = php["ab"], php["lockctl"]
    return (
        "Reading the row. Both tools open a connection per request here (PHP's built-in "
        "server closes it after every answer); lockctl sends each request in the same breath "
        "as its connect (on loopback the handshake is over when the connect call returns), "
        "where ab first waits for its event loop to report the connection writable, so "
        "lockctl's requests reach PHP's workers a turn sooner. The two tools also differ in "
        f"what the endpoint has to do, not only in their own cost. Client CPU per request: lockctl {l['cpu_us']:.0f} µs, ab "
        f"{a['cpu_us']:.0f} µs (user + system, whole process, setup and read-back included "
        "for lockctl). Server CPU per request (the ten PHP workers and Redis): "
        f"{l['server_us']:.0f} µs under lockctl's requests, {a['server_us']:.0f} µs under ab's. "
        f"Purchases per 1000 requests: {l['bought_per_k']:.0f} under lockctl, "
        f"{a['bought_per_k']:.0f} under ab. run_demo.php answers busy when its lock is taken, "
        "and a purchase (GET, DECR, the release script) costs it more than a busy answer (one "
        "failed SET NX); how many requests find the lock free depends on when they arrive, so "
        "the same endpoint, at the same concurrency, does a different amount of work per "
        "request under each tool.")



def ensure_tools():
    """Installs the HTTP benchmark's tools when missing (as root), or says what to install."""
    missing = [pkg for cmd, pkg in TOOLS if not shutil.which(cmd)]
    php_modules = subprocess.run(["php", "-m"], capture_output=True, text=True).stdout \
        if shutil.which("php") else ""
    if "redis" not in php_modules.split():
        missing.append("php-redis")
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        sys.exit("scripts/bench needs these Debian packages: " + " ".join(missing) +
                 "\n  install them with: sudo apt-get install -y " + " ".join(missing))
    print("scripts/bench: installing " + " ".join(missing), file=sys.stderr)
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True,
                   env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
                   stdout=subprocess.DEVNULL)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, log):
    deadline = time.time() + 10
    while time.time() < deadline:
        if proc.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit(f"{what} did not start; its log:\n" + open(log).read())


def pinned(cpu):
    """`taskset -c CPU` on a machine with two cores or more: nginx on one core and each client
    in turn on the other, so that no tool's run depends on where the scheduler put it."""
    if (os.cpu_count() or 1) >= 2 and shutil.which("taskset"):
        return ["taskset", "-c", str(cpu)]
    return []


def make_ca(tmp):
    """A CA and a certificate it signed for 127.0.0.1, made with openssl in `tmp`; the paths of
    the CA, the certificate and its key."""
    p = lambda f: os.path.join(tmp, f)
    with open(p("server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    quiet = dict(check=True, capture_output=True, cwd=tmp)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=bench-ca", "-keyout", "ca.key", "-out", "ca.crt"], **quiet)
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=bench",
                    "-keyout", "server.key", "-out", "server.csr"], **quiet)
    subprocess.run(["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey",
                    "ca.key", "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out",
                    "server.crt"], **quiet)
    return p("ca.crt"), p("server.crt"), p("server.key")


def start_nginx(tmp, tls=None):
    """nginx serving ok.txt on a free port; with `tls` (certificate, key), over https too on a
    second port. The process and the port (and the https port, with `tls`)."""
    port = free_port()
    tls_port = free_port() if tls else None
    https = (f"server {{ listen 127.0.0.1:{tls_port} ssl; root {{www}}; "
             f"ssl_certificate {tls[0]}; ssl_certificate_key {tls[1]}; }}" if tls else "")
    www = os.path.join(tmp, "www")
    os.makedirs(www)
    with open(os.path.join(www, "ok.txt"), "w") as f:
        f.write("ok\n")
    conf = os.path.join(tmp, "nginx.conf")
    log = os.path.join(tmp, "nginx.log")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {log};
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 100000000;
  server {{ listen 127.0.0.1:{port}; root {www}; }}
  {https.replace("{www}", www)}
}}
""")
    # nginx's worker runs as nobody: it must be able to read the file.
    os.chmod(tmp, 0o755)
    # A session of its own, so that stop() ends the workers with the master.
    proc = subprocess.Popen([*pinned(0), "nginx", "-c", conf, "-p", tmp], stdout=subprocess.DEVNULL,
                            stderr=open(log, "a"), start_new_session=True)
    wait_port(port, proc, "nginx", log)
    if tls:
        wait_port(tls_port, proc, "nginx", log)
        return proc, port, tls_port
    return proc, port


def start_redis(tmp):
    port = free_port()
    log = os.path.join(tmp, "redis.log")
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", tmp, "--logfile", log],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    open(log, "a").close()
    wait_port(port, proc, "redis-server", log)
    return proc, port


def start_php(tmp, redis_port, workers):
    port = free_port()
    log = os.path.join(tmp, "php.log")
    proc = subprocess.Popen(
        ["php", "-S", f"127.0.0.1:{port}", "-t", FIXTURES],
        env=dict(os.environ, PHP_CLI_SERVER_WORKERS=str(workers), REDIS_PORT=str(redis_port)),
        stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    wait_port(port, proc, "php -S", log)
    return proc, port


def stop(proc):
    """Ends a server and, for nginx and php -S (each started in a session of its own), the
    worker processes it forked, which would otherwise live on."""
    try:
        if "php" in proc.args or "nginx" in proc.args:
            os.killpg(proc.pid, 9)
        else:
            proc.kill()
    except OSError:
        pass
    proc.wait()


def run_wrk(url, c, secs, pin=()):
    argv = [*pin, "wrk", "-t1", f"-c{c}", f"-d{secs}s", url]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    done = int(re.search(r"(\d+) requests in", out).group(1))
    return " ".join(argv), float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), done


def run_ab(url, c, n, keepalive, pin=()):
    argv = [*pin, "ab", "-q", *(["-k"] if keepalive else []), "-n", str(n), "-c", str(c), url]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return " ".join(argv), float(re.search(r"Requests per second:\s+([\d.]+)", out).group(1)), n


def run_lockctl(lockctl, redis_url, url, c, n, extra=(), pin=()):
    """`lockctl hammer --json --url`; `redis_url` only where the run reads a stock."""
    redis = ["--redis", redis_url] if redis_url else []
    argv = [*pin, lockctl, *redis, "hammer", "--json", "--url", url, "-n", str(n), "-c", str(c),
            *extra]
    out = subprocess.run(argv, capture_output=True, text=True)
    report = json.loads(out.stdout)
    shown = shlex.join(argv).replace(lockctl, "lockctl")
    return shown, report["throughput_rps"], n, report


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def rounds(repeat, runs):
    """Runs each of `runs` (name -> callable) once per round, in turns, the order reversed
    every other round. Per name: the median requests/s, a command line, every round's
    requests/s (in the order of the names), the median client CPU per request
    (µs, user + system, from getrusage) and the median of its per-round ratio to the first
    name's (the same round, seconds apart: a slow spell on this shared machine mostly hits
    both)."""
    results = {name: [] for name in runs}
    for r in range(repeat):
        # Every other round in the opposite order: whatever the run before leaves behind
        # (TIME_WAIT sockets, a warm or cold cache) falls on each tool in turn.
        order = list(runs.items()) if r % 2 == 0 else list(reversed(runs.items()))
        for name, run in order:
            before = children_cpu()
            cmd, rps, requests, *_ = run()
            cpu_us = (children_cpu() - before) * 1e6 / max(requests, 1)
            results[name].append((rps, cmd, cpu_us, requests))
            print(f"  round {r + 1}: {name:<8} {rps:>10.1f} requests/s, "
                  f"{cpu_us:5.1f} µs CPU per request", file=sys.stderr)
    first = next(iter(results.values()))
    out = {}
    for name, vals in results.items():
        ratios = [v[0] / f[0] for v, f in zip(vals, first)]
        out[name] = {
            "rps": statistics.median(v[0] for v in vals),
            "cmd": vals[0][1],
            "all": [v[0] for v in vals],
            "cpu_us": statistics.median(v[2] for v in vals),
            "ratio": statistics.median(ratios),
            "n": vals[0][3],
        }
    return out


def static_rows(lockctl, quick, repeat, tmp):
    nginx, port = start_nginx(tmp)
    try:
        url = f"http://127.0.0.1:{port}/ok.txt"
        secs, c = (1 if quick else 2), 50
        pin = pinned(1)
        run_wrk(url, c, 1, pin)  # warm up
        _, probe, _ = run_wrk(url, c, secs, pin)
        n = int(probe * secs)
        runs = {
            "wrk": lambda: run_wrk(url, c, secs, pin),
            "lockctl": lambda: run_lockctl(lockctl, None, url, c, n, pin=pin),
            "ab -k": lambda: run_ab(url, c, n, True, pin),
            "ab": lambda: run_ab(url, c, max(n // 4, 1000), False, pin),
        }
        return rounds(repeat, runs), url
    finally:
        stop(nginx)


def server_ticks(pids):
    """CPU time (clock ticks, user + system) used so far by the processes in `pids` and every
    process in their process groups (php -S forks its workers into its own)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: state, ppid, pgrp, ... utime (12th), stime (13th).
        if int(entry) in pids or int(fields[2]) in pids:
            total += int(fields[11]) + int(fields[12])
    return total


def php_rows(lockctl, quick, repeat, tmp):
    redis, redis_port = start_redis(tmp)
    php, port = start_php(tmp, redis_port, 10)
    try:
        redis_url = f"redis://127.0.0.1:{redis_port}"
        # Runs of a few seconds: PHP's built-in server wanders between faster and slower
        # spells (which of its workers gets which connection), and a one-second run
        # catches one spell where a longer one averages them.
        n, c = (2000 if quick else 20000), 10
        ab_url = f"http://127.0.0.1:{port}/run_demo.php?sku=bench_php"
        stock_key = "item:stock:bench_php"

        def stock():
            out = subprocess.run(["redis-cli", "-p", str(redis_port), "get", stock_key],
                                 check=True, capture_output=True, text=True).stdout
            return int(out)

        subprocess.run(["redis-cli", "-p", str(redis_port), "set", stock_key, "100000000"],
                       check=True, capture_output=True)
        url = f"http://127.0.0.1:{port}/run_demo.php?sku={{sku}}"
        verdicts = []
        # Per tool: the server's CPU per request (µs) and purchases per 1000 requests. The
        # endpoint's work depends on its answers (a purchase costs it more than "busy"), and
        # how many requests find the lock free depends on when they arrive.
        server = {"ab": [], "lockctl": []}
        tick_us = 1e6 / os.sysconf("SC_CLK_TCK")

        def measured(name, run, bought):
            def go():
                before = server_ticks({php.pid, redis.pid})
                cmd, rps, done, *rest = run()
                ticks = server_ticks({php.pid, redis.pid}) - before
                server[name].append((ticks * tick_us / done, bought(rest) * 1000 / done))
                return cmd, rps, done
            return go

        def ab_run():
            before = stock()
            cmd, rps, done = run_ab(ab_url, c, n, False)
            return cmd, rps, done, before - stock()

        def judged():
            cmd, rps, done, report = run_lockctl(lockctl, redis_url, url, c, n,
                                                 ["--preset", "tutorial", "--sku", "bench_php",
                                                  "--stock", "100000000"])
            verdicts.append(report["verdict"])
            return cmd, rps, done, report["bought"]

        run_ab(ab_url, c, n // 5, False)  # warm up
        runs = {"ab": measured("ab", ab_run, lambda rest: rest[0]),
                "lockctl": measured("lockctl", judged, lambda rest: rest[0])}
        table = rounds(repeat, runs)
        for name, vals in server.items():
            table[name]["server_us"] = statistics.median(v[0] for v in vals)
            table[name]["bought_per_k"] = statistics.median(v[1] for v in vals)
        return table, verdicts
    finally:
        stop(php)
        stop(redis)


def run(lockctl, quick, repeat):
    """Both benchmarks; returns the section of BENCHMARKS.md."""
    with tempfile.TemporaryDirectory() as tmp:
        print("HTTP: nginx static file", file=sys.stderr)
        static, static_url = static_rows(lockctl, quick, repeat, tmp)
        print("HTTP: the tutorial's PHP", file=sys.stderr)
        # More rounds for PHP: its rounds scatter more than nginx's (see php_rows).
        php, verdicts = php_rows(lockctl, quick, repeat + 6, tmp)
    versions = {
        "nginx": subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip(),
        "wrk": subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")[0],
        "ab": subprocess.run(["ab", "-V"], capture_output=True, text=True).stdout.split("\n")[0],
        "php": subprocess.run(["php", "-v"], capture_output=True, text=True).stdout.split("\n")[0],
    }
    lines = [HEADING, ""]
    w = lines.append
    pin = ("nginx pinned to core 0 and each client to core 1 (taskset), " if pinned(1) else "")
    w(f"Produced by `scripts/bench --only http` on {datetime.date.today().isoformat()}: "
      f"{os.cpu_count()} cores, loopback, {pin}lockctl built with `cargo build --release`. The "
      f"tools ran in turns ({len(static['wrk']['all'])} rounds against nginx, "
      f"{len(php['ab']['all'])} against PHP), so that a busy "
      "spell on this shared machine (other engineers build and test on it) hits all of them "
      "alike. Requests/s is the median round; the ratio is the median of the per-round ratios "
      "(each tool against the first, seconds apart in the same round); every round is listed, "
      "and so is each client's own CPU per request (user + system, median), which the noise "
      "moves least. " + "; ".join(versions.values()) + ".")
    w("")
    w("### nginx serving a 3-byte static file (1 worker), 50 connections")
    w("")
    w("| tool | requests/s (median) | ratio to wrk | client CPU µs/request | every round |")
    w("|---|---:|---:|---:|---|")
    for name in ["wrk", "lockctl", "ab -k", "ab"]:
        t = static[name]
        w(f"| {name} | {t['rps']:,.0f} | {t['ratio']:.2f} | {t['cpu_us']:.1f} | "
          + ", ".join(f"{x:,.0f}" for x in t["all"]) + " |")
    w("")
    ratio = static["lockctl"]["ratio"]
    target = "met" if ratio >= 0.9 else "NOT met"
    vs_ab = statistics.median(l / a for l, a in zip(static["lockctl"]["all"], static["ab -k"]["all"]))
    w(f"lockctl reached {ratio:.2f}x wrk's requests/s (the target of 0.9x: {target}) and "
      f"{vs_ab:.2f}x ab -k's (median per-round ratios). lockctl and wrk each drive every "
      "connection from one thread; ab -k too; plain ab opens a connection per request.")
    w("")
    w("### The tutorial's run_demo.php under `PHP_CLI_SERVER_WORKERS=10 php -S`, 10 connections, "
      f"{php['ab']['n']:,} requests a run")
    w("")
    w("| tool | requests/s (median) | ratio to ab | client CPU µs/request | "
      "server CPU µs/request | purchases per 1000 requests | every round |")
    w("|---|---:|---:|---:|---:|---:|---|")
    for name in ["ab", "lockctl"]:
        t = php[name]
        w(f"| {name} | {t['rps']:,.0f} | {t['ratio']:.2f} | {t['cpu_us']:.1f} | "
          f"{t['server_us']:.1f} | {t['bought_per_k']:.0f} | "
          + ", ".join(f"{x:,.0f}" for x in t["all"]) + " |")
    w("")
    ratio = php["lockctl"]["ratio"]
    target = "met" if ratio >= 1.0 else "NOT met"
    per_round = sorted(l / a for l, a in zip(php["lockctl"]["all"], php["ab"]["all"]))
    ahead = sum(r >= 1 for r in per_round)
    w(f"lockctl reached {ratio:.2f}x ab's requests/s here (the target, at least ab's: {target}); "
      f"the per-round ratios ran from {per_round[0]:.2f} to {per_round[-1]:.2f}, lockctl ahead "
      f"in {ahead} of {len(per_round)} rounds. lockctl's runs also set and read the stock and judged each run: "
      f"{', '.join(verdicts)}.")
    w("")
    w(php_reading(php))
    w("")
    w("Commands (ports are free ones picked per run):")
    w("")
    w("```")
    for table in (static, php):
        for t in table.values():
            w(t["cmd"])
    w("```")
    w("")
    return "\n".join(lines)


def run_tls(lockctl, quick, repeat):
    """lockctl against nginx's static file over http:// and https://, in the same rounds:
    kept-alive connections (the cost of TLS records) and a connection per request (the cost
    of a handshake each). Returns the section of BENCHMARKS.md."""
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        ca, cert, key = make_ca(tmp)
        nginx, port, tls_port = start_nginx(tmp, (cert, key))
        try:
            plain = f"http://127.0.0.1:{port}/ok.txt"
            secure = f"https://127.0.0.1:{tls_port}/ok.txt"
            tls = ["--tls-ca", ca]
            close = ["--header", "Connection: close"]
            pin = pinned(1)
            c = 50
            n = 20000 if quick else 200000
            n_close = n // 20
            run_lockctl(lockctl, None, secure, c, 1000, tls, pin)  # warm up
            runs = {
                "http": lambda: run_lockctl(lockctl, None, plain, c, n, (), pin),
                "https": lambda: run_lockctl(lockctl, None, secure, c, n, tls, pin),
                "http, close": lambda: run_lockctl(lockctl, None, plain, c, n_close, close, pin),
                "https, close": lambda: run_lockctl(lockctl, None, secure, c, n_close,
                                                    [*tls, *close], pin),
            }
            results = rounds(repeat, runs)
        finally:
            stop(nginx)
    nginx_v = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
    pin = ("nginx pinned to core 0 and lockctl to core 1 (taskset), " if pinned(1) else "")
    lines = [TLS_HEADING, ""]
    w = lines.append
    w(f"Produced by `scripts/bench --only https` on {datetime.date.today().isoformat()}: "
      f"{os.cpu_count()} cores, loopback, {pin}lockctl built with `cargo build --release`, "
      f"{nginx_v} (1 worker) serving a 3-byte file over http:// and https:// (TLS 1.3, an "
      f"RSA 2048 certificate of a CA made for the run, given with `--tls-ca`), "
      f"{len(results['http']['all'])} rounds, the four runs in turns. Client CPU is lockctl's "
      "own (user + system, from getrusage), per request, median round: what TLS costs the "
      "instrument, beside what it costs the server.")
    w("")
    w("| run | connections | requests | requests/s (median) | ratio to http | "
      "client CPU µs/request | every round |")
    w("|---|---|---:|---:|---:|---:|---|")
    for name, conns in [("http", "50 kept alive"), ("https", "50 kept alive"),
                        ("http, close", "one per request"), ("https, close", "one per request")]:
        t = results[name]
        base = results["http" if "close" not in name else "http, close"]
        ratio = statistics.median(a / b for a, b in zip(t["all"], base["all"]))
        w(f"| {name} | {conns} | {t['n']:,} | {t['rps']:,.0f} | {ratio:.2f} | "
          f"{t['cpu_us']:.1f} | " + ", ".join(f"{x:,.0f}" for x in t["all"]) + " |")
    w("")
    kept = results["https"]["cpu_us"] - results["http"]["cpu_us"]
    each = results["https, close"]["cpu_us"] - results["http, close"]["cpu_us"]
    w(f"TLS cost the client {kept:.1f} µs of CPU per request on kept-alive connections (the "
      f"records: encrypting the request, decrypting the answer) and {each:.1f} µs per request "
      "with a connection each (a handshake each: key exchange and checking the certificate "
      "chain; ratio columns compare each run with plain http in the same round). Requests/s "
      "falls further than the client's CPU explains: nginx's one worker does the server's side "
      "of TLS on its one core, so the ratios say what this server managed, the CPU column "
      "what lockctl spent.")
    w("")
    w("Commands (ports are free ones picked per run; the CA is the run's own):")
    w("")
    w("```")
    for t in results.values():
        w(t["cmd"])
    w("```")
    w("")
    return "\n".join(lines)
