"""docs/python.md is what crates/python/gen_docs.py renders from the installed package."""

import os
import subprocess
import sys

from conftest import REPO


def test_the_api_reference_is_current():
    out = subprocess.run(
        [sys.executable, os.path.join(REPO, "crates", "python", "gen_docs.py")],
        capture_output=True, text=True, check=True,
    ).stdout
    with open(os.path.join(REPO, "docs", "python.md")) as f:
        assert f.read() == out, (
            "docs/python.md is stale: target/python/bin/python crates/python/gen_docs.py"
            " > docs/python.md"
        )
