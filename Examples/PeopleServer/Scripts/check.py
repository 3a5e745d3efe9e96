#!/usr/bin/env python3
"""The example server's test, as its users would run it (run by .ci/run).

Builds the example, then for each store (an SQLite file; a throwaway PostgreSQL cluster when
the server binaries exist): starts two server processes, A and B, on the one store; follows
B's live stream; drives both with wrk (a fixed number of requests per thread, a mix of reads
and writes, loopback only); and checks that

- every response was 200, 201 or 409 (the 409s are the intended lost-update refusals),
- every person a 201 acknowledged is stored afterwards,
- every seeded person holds at most one patched age, and the stored age is that one: no
  acknowledged patch was lost and no stale patch overwrote another,
- B's live stream showed every write made through A (its creates and its patches), marked
  as remote commits by author A.

    python3 Examples/PeopleServer/Scripts/check.py [--release] [--requests N] [--store sqlite|postgres|all]
"""
import argparse
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
SEEDS = 40


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read() or b"null")
        except ValueError:
            return error.code, None


def wait_until(what, predicate, seconds=60):
    """Polls `predicate` until it holds; fails the run naming `what` after `seconds` (a guard
    against hanging, not a timing assertion)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    sys.exit(f"check: gave up waiting for {what}")


class Postgres:
    """A throwaway cluster on 127.0.0.1 (as `nobody` when running as root: PostgreSQL refuses root)."""

    def __init__(self, work):
        binaries = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if not binaries:
            raise FileNotFoundError
        self.bin = binaries[-1].parent
        self.dir = Path(work) / "pg"
        self.dir.mkdir()
        self.port = free_port()
        self.prefix = []
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chown(self.dir, nobody.pw_uid, nobody.pw_gid)
            self.prefix = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
        self.run("initdb", "-D", str(self.dir / "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.run("pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "log"), "-w",
                 "-o", f"-p {self.port} -h 127.0.0.1 -k ''", "start")
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def run(self, tool, *args):
        subprocess.run(self.prefix + [str(self.bin / tool), *args], check=True, stdout=subprocess.DEVNULL,
                       cwd=self.dir)

    def stop(self):
        self.run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")


def start_server(binary, name, store, work):
    port = free_port()
    log = open(Path(work) / f"server-{name}.log", "w")
    process = subprocess.Popen([binary, "--port", str(port), "--store", store, "--name", name],
                               stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def up():
        if process.poll() is not None:
            sys.exit(f"check: server {name} exited with {process.returncode}; see {log.name}")
        try:
            return call("GET", base + "/stats")[0] == 200
        except OSError:
            return False

    wait_until(f"server {name} to listen", up)
    return process, base


def run_wrk(base, server, label, seed_first, requests, work, threads=2, connections=16):
    out = Path(work) / f"wrk-{server}-{label}.log"
    for marker in Path(work).glob(f"{out.name}.done.*"):
        marker.unlink()
    env = dict(os.environ, SERVER=server, SEED_FIRST=str(seed_first), SEED_COUNT=str(SEEDS),
               REQUESTS=str(requests), OUT=str(out))
    process = subprocess.Popen(["wrk", "-t", str(threads), "-c", str(connections), "-d", "600s", "--latency",
                                "-s", str(PACKAGE / "Scripts" / "load.lua"), base],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return process, out


def parse_log(path):
    statuses, created, ages = Counter(), set(), defaultdict(set)
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "S":
            statuses[int(parts[1])] += 1
        elif parts[0] == "C":
            created.add(int(parts[1]))
        elif parts[0] == "P":
            ages[int(parts[1])].add(int(parts[2]))
    return statuses, created, ages


def summary(wrk_output):
    rate = re.search(r"Requests/sec:\s+([\d.]+)", wrk_output)
    p99 = re.search(r"^\s+99%\s+(\S+)", wrk_output, re.M)
    return (rate.group(1) if rate else "?"), (p99.group(1) if p99 else "?")


def check_store(binary, store, label, work, requests):
    print(f"== {label}")
    a, base_a = start_server(binary, "A", store, work)
    b, base_b = start_server(binary, "B", store, work)
    live_path = Path(work) / f"live-B-{label}.txt"
    live_a_path = Path(work) / f"live-A-{label}.txt"
    live = subprocess.Popen(["curl", "-sN", base_b + "/live"], stdout=open(live_path, "w"))
    live_a = subprocess.Popen(["curl", "-sN", base_a + "/live"], stdout=open(live_a_path, "w"))
    try:
        wait_until("the live streams", lambda: ": connected" in live_path.read_text() and ": connected" in live_a_path.read_text())
        seed_first = None
        for index in range(SEEDS):
            status, person = call("POST", base_a + "/people", {"name": "seed-placeholder", "age": 0})
            assert status == 201, status
            key = int(person["id"].split("/")[1])
            # Named after their own key, so that the wrk script can spell their snapshot.
            edited = dict(person, name=f"seed-{key}")
            status, _ = call("PATCH", f"{base_a}/people/{key}", {"expected": person, "edited": edited})
            assert status == 200, status
            seed_first = key if seed_first is None else seed_first
            assert key == seed_first + index, "seeded people have consecutive keys"

        wrk_a, log_a = run_wrk(base_a, "A", label, seed_first, requests, work)
        wrk_b, log_b = run_wrk(base_b, "B", label, seed_first, requests, work)
        # Each wrk thread stops after its requests and leaves a marker; wrk itself then stops
        # on SIGINT (its -d is only an upper bound) and prints its statistics.
        for process, log in ((wrk_a, log_a), (wrk_b, log_b)):
            wait_until("wrk to send its requests", lambda: all(Path(f"{log}.done.{t}").exists() for t in (1, 2)), seconds=300)
            process.send_signal(signal.SIGINT)
        output_a, _ = wrk_a.communicate()
        output_b, _ = wrk_b.communicate()
        assert wrk_a.returncode == 0 and wrk_b.returncode == 0, f"wrk exited with {wrk_a.returncode}, {wrk_b.returncode}: {output_a} {output_b}"
        results = {name: parse_log(path) for name, path in (("A", log_a), ("B", log_b))}
        # A response that never came (wrk's timeout) or a broken connection is not in the logs.
        for name, output in (("A", output_a), ("B", output_b)):
            errors = re.search(r"Socket errors:.*", output)
            if errors:
                sys.exit(f"check: wrk against server {name}: {errors.group(0)}")

        problems = []
        for name, (statuses, created, _) in results.items():
            unexpected = {code: n for code, n in statuses.items() if code not in (200, 201, 409)}
            if unexpected:
                problems.append(f"server {name} answered {unexpected}")
            # Each of wrk's two threads sends `requests`; those still in flight on its
            # connections when it stops are not answered.
            if sum(statuses.values()) < 2 * requests - 16:
                problems.append(f"server {name} answered only {sum(statuses.values())} of {2 * requests} requests")
            if not created or not statuses[409]:
                problems.append(f"server {name}: the mix should create people and meet conflicts ({dict(statuses)})")
        # Every acknowledged create is stored.
        for name, (_, created, _) in results.items():
            for key in sorted(created):
                status, person = call("GET", f"{base_b}/people/{key}")
                if status != 200 or not person["name"].startswith(f"wrk-{name}-"):
                    problems.append(f"person {key}, created through {name}, reads back as {status}")
        # Every seeded person holds at most one patched age, and that is the stored one.
        for key in range(seed_first, seed_first + SEEDS):
            seen = set()
            for _, _, ages in results.values():
                seen |= ages.get(key, set()) - {0}
            status, person = call("GET", f"{base_a}/people/{key}")
            if len(seen) > 1:
                problems.append(f"seeded person {key} was acknowledged with several ages {sorted(seen)}: a lost update")
            elif person["age"] != (next(iter(seen)) if seen else 0):
                problems.append(f"seeded person {key} stores age {person['age']}, acknowledged {sorted(seen)}")
        # B's live stream shows every write made through A (A's own commits, as A's stream
        # shows them), as remote commits by A.
        made_by_a = writes(live_a_path, author="A", remote=False)
        if not made_by_a:
            problems.append("A's live stream showed none of its own commits")
        wait_until("B's live stream to show every write made through A",
                   lambda: made_by_a <= writes(live_path, author="A", remote=True))
        problems += check_api(base_a)
        # Both servers stop on SIGTERM though the live streams are still open: the streams end
        # on graceful shutdown (before, each server waited for its clients to leave).
        for process in (a, b):
            process.send_signal(signal.SIGTERM)
        for name, process in (("A", a), ("B", b)):
            try:
                if process.wait(timeout=30) != 0:
                    problems.append(f"server {name} exited with {process.returncode} on SIGTERM, not after a graceful shutdown")
            except subprocess.TimeoutExpired:
                problems.append(f"server {name} did not stop within 30 s of SIGTERM while a live stream was open")
        if problems:
            sys.exit("check: " + "\n       ".join(problems + server_failures(work)))
        for name, output in (("A", output_a), ("B", output_b)):
            rate, p99 = summary(output)
            statuses = dict(sorted(results[name][0].items()))
            print(f"   server {name}: {rate} requests/s, p99 {p99}, responses {statuses}")
        print(f"   ok: {sum(len(r[1]) for r in results.values())} acknowledged creates stored, {SEEDS} patched people "
              f"consistent, B's live stream showed all {len(made_by_a)} writes made through A")
    finally:
        for process in (live, live_a, a, b):
            process.send_signal(signal.SIGTERM)
        for process in (live, live_a, a, b):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def check_api(base):
    """The API table's answers beyond the load's mix (Docs/Servers.md, "The example server"):
    a page of people and its total, a PATCH from a stale read (409 with the conflict and the
    current person), a PATCH to a taken email, a PATCH naming a pet that does not exist,
    negative ages, pets of a person, deletes and what is gone after them. Returns the problems
    found."""
    problems = []

    def expect(what, got, wanted):
        if got != wanted:
            problems.append(f"{what}: {got}, expected {wanted}")

    status, ann = call("POST", base + "/people", {"name": "api-Ann", "age": 30, "email": "api-ann@example.org"})
    expect("POST Ann", status, 201)
    status, bob = call("POST", base + "/people", {"name": "api-Bob", "age": 40, "email": "api-bob@example.org"})
    expect("POST Bob", status, 201)
    if problems:
        return problems
    status, _ = call("POST", base + "/people", {"name": "api-Ann2", "age": 1, "email": "api-ann@example.org"})
    expect("POST with a taken email", status, 409)
    status, _ = call("POST", base + "/people", {"name": "api-Cid", "age": -1})
    expect("POST with a negative age", status, 400)

    def page(query):
        status, body = call("GET", base + "/people?" + query)
        body = body or {}
        return status, [person["name"] for person in body.get("items", [])], body.get("total")
    # By name, then age; the total counts every match, not the page.
    expect("GET /people, the second page of one", page("name=api-&limit=1&offset=1"), (200, ["api-Bob"], 2))
    expect("GET /people older than 34", page("name=api-&minAge=35"), (200, ["api-Bob"], 1))
    # A second PATCH from the same read is a lost update: 409 with what the client read, what is
    # stored, and the person as stored.
    ann_key = ann["id"].split("/")[1]
    status, stored = call("PATCH", f"{base}/people/{ann_key}", {"expected": ann, "edited": dict(ann, age=31)})
    expect("PATCH Ann's age", (status, (stored or {}).get("age")), (200, 31))
    status, report = call("PATCH", f"{base}/people/{ann_key}", {"expected": ann, "edited": dict(ann, age=32)})
    report = report or {}
    expect("PATCH from a stale read", (status, report.get("conflicts"), (report.get("current") or {}).get("age")),
           (409, [{"key": "age", "expected": "30", "stored": "31"}], 31))
    bob_key = bob["id"].split("/")[1]
    status, _ = call("PATCH", f"{base}/people/{bob_key}", {"expected": bob, "edited": dict(bob, age=-1)})
    expect("PATCH to a negative age", status, 400)
    status, _ = call("PATCH", f"{base}/people/{bob_key}", {"expected": bob, "edited": dict(bob, email="api-ann@example.org")})
    expect("PATCH to a taken email", status, 409)
    status, _ = call("PATCH", f"{base}/people/{bob_key}", {"expected": bob, "edited": dict(bob, pets=["Pet/999999"])})
    expect("PATCH naming a pet that does not exist", status, 422)
    status, _ = call("PATCH", f"{base}/people/{bob_key}", {"expected": bob, "edited": dict(bob, name="")})
    expect("PATCH to an empty name", status, 400)
    status, _ = call("POST", f"{base}/people/{bob_key}/pets", {"name": "api-Rex", "species": "dog"})
    expect("POST a pet", status, 201)
    status, pets = call("GET", f"{base}/people/{bob_key}/pets")
    expect("GET the pets", (status, [p["name"] for p in pets or []]), (200, ["api-Rex"]))
    _, before = call("GET", base + "/stats")
    status, _ = call("DELETE", f"{base}/people/{bob_key}")
    expect("DELETE Bob", status, 204)
    # Bob's pet went with him (the load is over: nothing else writes now).
    _, after = call("GET", base + "/stats")
    expect("people and pets after the delete", (after["people"], after["pets"]), (before["people"] - 1, before["pets"] - 1))
    for what, method, path, body in (("GET Bob after the delete", "GET", f"/people/{bob_key}", None),
                                     ("PATCH Bob after the delete", "PATCH", f"/people/{bob_key}", {"expected": bob, "edited": dict(bob, age=41)}),
                                     ("DELETE Bob again", "DELETE", f"/people/{bob_key}", None),
                                     ("POST a pet to Bob after the delete", "POST", f"/people/{bob_key}/pets", {"name": "x", "species": "cat"}),
                                     ("GET the pets of Bob after the delete", "GET", f"/people/{bob_key}/pets", None)):
        status, _ = call(method, base + path, body)
        expect(what, status, 404)
    status, _ = call("GET", base + "/stats")
    expect("GET /stats", status, 200)
    return problems


def server_failures(work):
    """The failures the servers logged (a 500's error, a failed background save), so that a
    failed run says why without its logs."""
    found = []
    for log in sorted(Path(work).glob("server-*.log")):
        found += [f"{log.name}: {line}" for line in log.read_text(errors="replace").splitlines() if " failed" in line][:10]
    return found


def writes(live_path, author, remote):
    """The objects inserted or updated by `author`'s commits in a live stream, as
    ("inserted" | "updated", "Person/12") pairs."""
    found = set()
    for line in live_path.read_text().splitlines():
        if line.startswith("data: "):
            event = json.loads(line[6:])
            if event["author"] == author and event["remote"] == remote:
                found |= {("inserted", i) for i in event["inserted"]} | {("updated", i) for i in event["updated"]}
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", action="store_true", help="build and measure a release build")
    parser.add_argument("--requests", type=int, default=1500, help="requests per wrk thread (two threads per server)")
    parser.add_argument("--store", choices=["sqlite", "postgres", "all"], default="all")
    options = parser.parse_args()
    for tool in ("wrk", "curl"):
        if shutil.which(tool) is None:
            sys.exit(f"check: '{tool}' is missing (apt-get install {tool})")
    configuration = "release" if options.release else "debug"
    # The server's own sources are compiled afresh every time (their times are renewed):
    # SwiftPM does not recompile them when only a non-public field of a public library struct
    # changes, yet that struct's layout is compiled into them (every @Entity init), and a stale
    # copy crashed the server.
    for source in (PACKAGE / "Sources").rglob("*.swift"):
        os.utime(source)
    subprocess.run(["swift", "build", "-c", configuration, "--package-path", str(PACKAGE)], check=True)
    binary = str(PACKAGE / ".build" / configuration / "PeopleServer")
    work = tempfile.mkdtemp(prefix="people-server-")
    os.chmod(work, 0o755)
    passed = False
    try:
        if options.store in ("sqlite", "all"):
            check_store(binary, str(Path(work) / "people.sqlite"), "sqlite", work, options.requests)
        if options.store in ("postgres", "all"):
            try:
                postgres = Postgres(work)
            except FileNotFoundError:
                print("== postgres: skipped (no PostgreSQL server binaries; apt-get install postgresql to run it)")
                return
            try:
                check_store(binary, postgres.url, "postgres", work, options.requests)
            finally:
                postgres.stop()
        passed = True
    finally:
        if passed:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"check: the servers' logs and live streams are kept in {work}")


if __name__ == "__main__":
    main()
