"""psutil's own test suite run against taskdiag.psutil: psutil 7.2.2's sdist is fetched once
(pip download, kept in target/), every file of its tests/ runs with the taskdiag_shim plugin
(psutil_suite/: psutil's process API swapped for taskdiag.psutil's before each test and after
each reload), and so do psutil's example scripts (scripts/: those psutil's test_scripts.py
runs, through the swap in each child Python, and the interactive and hardware ones it only
parses, run here). Every result counts, each subtest's too: what fails must be exactly
psutil_suite/expected_failures.txt, where each entry says why; a result that starts failing,
or a listed one that passes (but those listed as "flaky:" or "environment:"), fails this test.

Run as a script, it prints the counts of both psutil itself and taskdiag.psutil (the table
of docs/python.md):

    target/python/bin/python crates/python/tests/test_psutil_suite.py

Its cost is kept low (CI's budget is tight): psutil's memory-leak tests (test_memleaks.py,
which psleak runs 200 times a call and more on each retry) run with LEAK_TIMES calls, with
the objects made before each frozen out of psleak's garbage collections (taskdiag_shim), in
a pytest of their own beside the others'; one test whose subject is not taskdiag is left
out (DESELECTED, with why). The whole suite runs without CAP_SYS_TIME: psutil's test_sudo.py
would set the machine's clock an hour ahead (and back); without it, psutil skips those tests
("needs root").
"""

import json
import os
import pty
import select
import shutil
import signal
import site
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PLUGIN = os.path.join(HERE, "psutil_suite")
VERSION = "7.2.2"
CACHE = os.path.join(REPO, "target", "psutil-suite")
# psleak's calls per measurement in test_memleaks.py (its default: 200).
LEAK_TIMES = 20
LEAKS = "test_memleaks.py"
# Left out, with why. psutil's system-wide net_connections() walks every process's
# descriptors: its leak test (psutil's function, not swapped: taskdiag plays no part in it)
# sees memory move with the processes that come and go on the machine and retries for 30-40 s
# here, with psutil itself as much (alone it passes at once).
DESELECTED = {
    "tests/test_memleaks.py::TestModuleFunctionsLeaks::test_net_connections":
        "psutil's own system-wide net_connections(), 30-40 s of retries on a busy machine",
}
# psutil's example scripts its test_scripts.py only parses (interactive, or that kill), or
# skips where the machine has no such hardware: run here, through the swap.
INTERACTIVE = ["top.py", "iotop.py", "nettop.py", "cpu_distribution.py"]
HARDWARE = ["battery.py", "fans.py", "sensors.py", "temperatures.py"]
# What a hardware script may end with where the machine has none (psutil's own messages).
NO_HARDWARE = ["no battery is installed", "can't read any temperature", "no fans detected",
               "platform not supported"]


def suite():
    """psutil VERSION's sdist tests/ and scripts/ directories, fetched and unpacked once; the
    directory that holds them."""
    root = os.path.join(CACHE, f"psutil-{VERSION}")
    done = os.path.join(root, ".unpacked")
    if os.path.exists(done):
        return root
    os.makedirs(CACHE, exist_ok=True)
    sdist = os.path.join(CACHE, f"psutil-{VERSION}.tar.gz")
    if not os.path.exists(sdist):
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
             "-d", CACHE, f"psutil=={VERSION}"],
            check=True,
        )
    shutil.rmtree(root, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        # Not the sdist's psutil/ package: the tests import the installed psutil.
        members = [m for m in tar.getmembers()
                   if m.name.split("/")[1:2] in (["tests"], ["scripts"])]
        tar.extractall(CACHE, members=members)
    open(done, "w").close()
    return root


def expected():
    """expected_failures.txt: test id -> why."""
    out = {}
    with open(os.path.join(PLUGIN, "expected_failures.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                test, why = line.split(" | ", 1)
                out[test.strip()] = why.strip()
    return out


def suite_files(root):
    """Every test file of the suite."""
    return sorted(f for f in os.listdir(os.path.join(root, "tests"))
                  if f.startswith("test_") and f.endswith(".py"))


def environment(swap, results, log=None, leaks=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKDIAG_", "PSUTIL_"))}
    # psutil's tests start psutil's scripts with the real path of this interpreter (the
    # system's python3, not this virtual environment's): this environment's packages, and
    # the sitecustomize that swaps psutil in each of them, come by PYTHONPATH.
    env["PYTHONPATH"] = os.pathsep.join([PLUGIN] + site.getsitepackages())
    env["PYTHONUNBUFFERED"] = "1"
    env["TASKDIAG_SUITE_RESULTS"] = results
    if swap:
        env["TASKDIAG_PSUTIL_SWAP"] = "1"
    if log:
        env["TASKDIAG_SWAP_LOG"] = log
    if leaks:
        # psleak measures only with Python's allocator off (else psutil skips every test).
        env["PYTHONMALLOC"] = "malloc"
        env["TASKDIAG_LEAK_TIMES"] = str(LEAK_TIMES)
    return env


# The reports of the last run's failures, by id.
WHY = {}


def run_suite(root, swap, log=None):
    """Every test file of the suite, with psutil's process API swapped (``swap``) or psutil
    itself: {test id: outcome} of both pytest runs (the leak tests', the others'), pytest's
    count of subtest reports by outcome, and the runs' closing lines."""
    files = suite_files(root)
    assert LEAKS in files and "test_linux.py" in files and "test_scripts.py" in files, files
    tmp = tempfile.mkdtemp(prefix="td-psutil-suite-")
    # Without CAP_SYS_TIME: test_sudo.py would set the machine's clock.
    cmd = ["setpriv", "--bounding-set=-sys_time", "--inh-caps=-sys_time", "--",
           sys.executable, "-m", "pytest", "-p", "taskdiag_shim", "-p", "no:cacheprovider",
           "-q", "-W", "ignore", "-rfE"]
    runs = []
    try:
        deselect = [a for t in DESELECTED for a in ("--deselect", t)]
        for leaks, which in ((True, [LEAKS]), (False, [f for f in files if f != LEAKS])):
            results = os.path.join(tmp, f"results-{leaks}.json")
            # psleak's runs are steadier where pytest does not capture what they print.
            p = subprocess.Popen(
                cmd + ["-s"] * leaks + deselect + [f"tests/{f}" for f in which], cwd=root,
                env=environment(swap, results, log, leaks),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, errors="backslashreplace",
            )
            runs.append((p, results))
        outcomes, reports, summaries = {}, {}, []
        WHY.clear()
        for p, results in runs:
            out, _ = p.communicate(timeout=900)
            lines = out.strip().splitlines()
            summaries.append(lines[-1] if lines else "")
            assert os.path.exists(results), (
                f"pytest recorded nothing (exit {p.returncode}):\n{out[-3000:]}"
            )
            with open(results) as f:
                got = json.load(f)
            outcomes.update(got["results"])
            WHY.update(got["why"])
            for outcome, n in got["subtest_reports"].items():
                reports[outcome] = reports.get(outcome, 0) + n
        return outcomes, reports, summaries
    finally:
        for p, _ in runs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def counts(outcomes, reports):
    """How many tests passed, failed and were skipped, and the subtests' reports."""
    tests = {}
    for key, outcome in outcomes.items():
        if not (key.endswith("]") and " [" in key):
            tests[outcome] = tests.get(outcome, 0) + 1
    return {"tests": tests, "subtests": reports}


def run_script(root, name, args, log, interactive=False):
    """psutil's example script ``name`` through the swap: (exit status, output). An
    interactive one runs on a terminal of its own until it has drawn its screens for a
    while, then is stopped (SIGTERM)."""
    env = environment(True, os.devnull, log)
    env.update(TERM="xterm", COLUMNS="120", LINES="40")
    cmd = [sys.executable, os.path.join(root, "scripts", name), *args]
    if not interactive:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL, errors="backslashreplace")
        return r.returncode, r.stdout + r.stderr
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.execve(cmd[0], cmd, env)
        finally:
            os._exit(127)
    out = b""
    deadline = time.monotonic() + 1.5
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
        ended, status = os.waitpid(pid, os.WNOHANG)
        if not ended:
            os.kill(pid, signal.SIGTERM)
            _, status = os.waitpid(pid, 0)
            # Stopped by us while it ran: as good as a clean exit.
            return 0, out.decode(errors="replace")
        return os.waitstatus_to_exitcode(status), out.decode(errors="replace")
    finally:
        os.close(fd)


def swapped(log):
    """The scripts whose psutil was swapped (their names, from the swap's log)."""
    if not os.path.exists(log):
        return set()
    with open(log) as f:
        return {line.split()[1] for line in f if len(line.split()) > 1}


def test_psutils_own_tests_pass_but_the_listed_ones():
    import psutil

    assert psutil.__version__ == VERSION
    root = suite()
    with tempfile.TemporaryDirectory(prefix="td-swap-log-") as tmp:
        log = os.path.join(tmp, "swapped")
        outcomes, reports, summaries = run_suite(root, swap=True, log=log)
        ran_swapped = swapped(log)
    print("psutil's suite against taskdiag.psutil:", counts(outcomes, reports), summaries)
    assert sum(v == "passed" for v in outcomes.values()) > 500, summaries
    failed = {t for t, outcome in outcomes.items() if outcome == "failed"}
    listed = expected()
    either = {t for t, why in listed.items() if why.startswith(("flaky:", "environment:"))}
    new = sorted(failed - listed.keys())
    fixed = sorted(listed.keys() - failed - either)
    assert not new, "psutil tests that fail against taskdiag.psutil:\n" + "\n".join(
        f"{t}\n    {WHY.get(t, '')[-800:]}" for t in new)
    assert not fixed, "listed as failing but pass (update expected_failures.txt):\n" + "\n".join(fixed)
    # The example scripts psutil's test_scripts.py runs ran through the swap.
    for script in ["procinfo.py", "ps.py", "pstree.py", "pmap.py", "pidof.py", "procsmem.py",
                   "netstat.py", "free.py"]:
        assert script in ran_swapped, (script, sorted(ran_swapped))


def test_psutils_other_example_scripts_run_through_the_swap():
    """The scripts psutil's test_scripts.py only parses or skips here: the interactive ones
    draw their screens, killall.py kills (a process of ours), the hardware ones end as psutil
    ends them on a machine without such hardware."""
    root = suite()
    listed = sorted(f for f in os.listdir(os.path.join(root, "scripts")) if f.endswith(".py"))
    assert set(INTERACTIVE + HARDWARE + ["killall.py"]) <= set(listed), listed
    with tempfile.TemporaryDirectory(prefix="td-scripts-") as tmp:
        log = os.path.join(tmp, "swapped")
        # A process of ours with a name of its own, for killall.py.
        name = f"tdkill{os.getpid()}"[:15]
        victim_exe = os.path.join(tmp, name)
        shutil.copy("/bin/sleep", victim_exe)
        victim = subprocess.Popen([victim_exe, "1000"])
        try:
            results = {}
            # Interactive ones, and the rest, at the same time (each mostly waits).
            import concurrent.futures

            with concurrent.futures.ThreadPoolExecutor(len(INTERACTIVE) + len(HARDWARE)) as pool:
                jobs = {s: pool.submit(run_script, root, s, [], log, True) for s in INTERACTIVE}
                for s in HARDWARE:
                    jobs[s] = pool.submit(run_script, root, s, [], log)
                for s, job in jobs.items():
                    results[s] = job.result()
            # The interactive scripts (iotop.py) ask processes of process_iter() things too:
            # the same race as killall.py's below (psutil's as much), run again when it hit.
            for s in INTERACTIVE:
                for _ in range(2):
                    if "NoSuchProcess" not in results[s][1]:
                        break
                    results[s] = run_script(root, s, [], log, True)
            # killall.py asks each process of process_iter() its name(): one that ends in
            # between raises NoSuchProcess out of the script (psutil's own race, psutil's as
            # much); alone, and again if another process of the machine did that.
            for _ in range(3):
                results["killall.py"] = run_script(root, "killall.py", [name], log)
                if "NoSuchProcess" not in results["killall.py"][1]:
                    break
            assert victim.wait(timeout=10) == -signal.SIGKILL, results["killall.py"]
        finally:
            if victim.poll() is None:
                victim.kill()
                victim.wait()
        ran = swapped(log)
    for s, (code, out) in results.items():
        assert "Traceback" not in out, (s, out[-2000:])
        assert s in ran, (s, "did not import psutil through the swap", out[-500:])
        if s in INTERACTIVE:
            assert code == 0 and len(out) > 200, (s, code, out[-500:])
        elif s in HARDWARE:
            assert code == 0 or any(m in out for m in NO_HARDWARE), (s, code, out)
        else:
            assert code == 0, (s, code, out)


def main():
    """The counts of psutil's suite with psutil itself and with taskdiag.psutil."""
    root = suite()
    for swap in (False, True):
        t0 = time.monotonic()
        outcomes, reports, summaries = run_suite(root, swap)
        took = time.monotonic() - t0
        print("taskdiag.psutil" if swap else "psutil", json.dumps(counts(outcomes, reports)),
              f"{took:.1f} s", summaries)
        for t, outcome in sorted(outcomes.items()):
            if outcome == "failed":
                print("   failed:", t)


if __name__ == "__main__":
    main()
