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


def test_the_python_guide_says_what_works():
    """What docs/python.md says of taskdiag.psutil and pandas is so: nothing left unanswered
    (memory_full_info, memory_maps and rlimit work; what no group carries is psutil's own),
    and DataFrame.from_arrow is pandas 3's."""
    with open(os.path.join(REPO, "docs", "python.md")) as f:
        doc = f.read()
    assert "NotImplementedError" not in doc
    assert "pandas 3" in doc and "pyarrow.table(t).to_pandas()" in doc
    import taskdiag.psutil as tp

    me = tp.Process()
    assert me.memory_full_info().uss > 0 and me.memory_maps() and me.rlimit(tp.RLIMIT_NOFILE)
