"""The decode-ahead's slice helpers are forked from it (``pipeline/ahead.py``
``_Helpers``): each starts with the decoder imported, answers every job on its own pipe,
and ends when its job pipe closes, without waiting for another helper. Run in a fresh
interpreter: a test process with threads is no place to fork."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

_PROBE = r"""
import json, os, sys, time
from pathlib import Path
from mysqlcdc.pipeline import ahead

out = {}
helpers = ahead._Helpers(2)
pids = [h.pid for h in helpers.procs]
out["children"] = [os.waitpid(p, os.WNOHANG) == (0, 0) for p in pids]
# a job that cannot be decoded comes back as the helper's message
wait = helpers.submit(1, None, Path(sys.argv[1]) / "x.arrow", Path(sys.argv[1]))
try:
    wait()
    out["failed"] = None
except RuntimeError as exc:
    out["failed"] = str(exc)
# the decoder's modules were imported before the fork: the helper did not import them
helpers.procs[0].jobs.close()          # the first helper's input ends: it alone exits
deadline = time.monotonic() + 10
while os.waitpid(pids[0], os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
    time.sleep(0.01)
out["first_ended"] = time.monotonic() < deadline
out["second_alive"] = os.waitpid(pids[1], os.WNOHANG) == (0, 0)
t0 = time.monotonic()
helpers.close()
out["closed_in"] = time.monotonic() - t0
try:
    os.waitpid(pids[1], os.WNOHANG)
    out["second_reaped"] = False
except ChildProcessError:
    out["second_reaped"] = True
print(json.dumps(out))
"""


def test_forked_helpers_answer_and_end_one_by_one(tmp_path):
    done = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["children"] == [True, True]
    assert out["failed"] and out["failed"].startswith("a slice failed: "), out
    assert out["first_ended"] and out["second_alive"], out
    assert out["closed_in"] < 5 and out["second_reaped"], out


_ORPHAN = r"""
import os, sys, time
from mysqlcdc.pipeline import ahead

pid = os.fork()
if pid == 0:                     # the decode-ahead, whose helper outlives it
    helpers = ahead._Helpers(1)
    print(helpers.procs[0].pid, flush=True)
    os._exit(0)                  # gone without closing the helper's input
os.waitpid(pid, 0)
"""


def test_a_helper_ends_when_its_decode_ahead_is_gone():
    done = subprocess.run([sys.executable, "-c", _ORPHAN], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    helper = int(done.stdout.split()[0])
    import os
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{helper}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break                # ended; nobody reaped it yet
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(helper, 9)
        pytest.fail("the helper outlived its decode-ahead by 10 s")
