"""psutil's own test suite (7.2.2, its Process tests) run against taskdiag.psutil: its sdist
is fetched once (pip download, kept in target/), its tests run with the taskdiag_shim plugin,
and what fails must be exactly psutil_suite/expected_failures.txt, where each entry says why.
A test that starts failing, or one listed that passes, fails this test (but those listed as
"flaky:", races in psutil's tests themselves, which may go either way)."""

import os
import re
import subprocess
import sys
import tarfile

import psutil
import pytest

from conftest import HERE, REPO

VERSION = "7.2.2"
FILES = ["test_process.py", "test_misc.py", "test_process_all.py", "test_posix.py",
         "test_contracts.py", "test_linux.py"]
CACHE = os.path.join(REPO, "target", "psutil-suite")


def suite():
    """psutil's tests/ directory of VERSION, fetched and unpacked once."""
    tests = os.path.join(CACHE, f"psutil-{VERSION}", "tests")
    if os.path.isdir(tests):
        return os.path.dirname(tests)
    os.makedirs(CACHE, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         "-d", CACHE, f"psutil=={VERSION}"],
        check=True,
    )
    with tarfile.open(os.path.join(CACHE, f"psutil-{VERSION}.tar.gz")) as tar:
        members = [m for m in tar.getmembers() if "/tests/" in m.name or m.name.endswith("/tests")]
        tar.extractall(CACHE, members=members)
    return os.path.join(CACHE, f"psutil-{VERSION}")


def expected():
    out = {}
    with open(os.path.join(HERE, "psutil_suite", "expected_failures.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                test, why = line.split(" | ", 1)
                out[test.strip()] = why.strip()
    return out


def test_psutils_own_tests_pass_but_the_listed_ones():
    assert psutil.__version__ == VERSION
    root = suite()
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "psutil_suite"))
    env.pop("TASKDIAG_BACKEND", None)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "taskdiag_shim", "-p", "no:cacheprovider", "-q",
         "-W", "ignore", "-rfE", *[f"tests/{f}" for f in FILES]],
        cwd=root, env=env, capture_output=True, text=True, timeout=900,
    )
    failed = set(re.findall(r"^(?:FAILED|ERROR) (\S+?)(?: - |$)", r.stdout, re.M))
    summary = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr
    assert re.search(r"\d+ passed", summary), summary
    listed = expected()
    flaky = {t for t, why in listed.items() if why.startswith("flaky:")}
    new = sorted(failed - listed.keys())
    fixed = sorted(listed.keys() - failed - flaky)
    assert not new, "psutil tests that fail against taskdiag.psutil:\n" + "\n".join(new)
    assert not fixed, "listed as failing but pass (update expected_failures.txt):\n" + "\n".join(fixed)
