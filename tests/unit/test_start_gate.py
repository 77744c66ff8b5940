"""The start gate: a node's ranks meet asleep before MPI_Init, so that the early ones do not spin
there while the late ones start Python. Real processes, real clock, real mpiexec."""
import json
import subprocess
import sys
import time
import uuid

import pytest

from tests.helpers import mpiexec

# one process at the gate: its arrival and departure (CLOCK_MONOTONIC is one clock for all processes
# of the machine) and the CPU it used while it waited there
AT_GATE = """
import json, sys, time
from iodl.launcher import node_gate
key, ranks, me, delay, idle, wait = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
time.sleep(delay)
cpu, came = time.process_time(), time.monotonic()
node_gate(key, ranks, me, idle_s=idle, wait_s=wait)
print(json.dumps({"me": me, "came": came, "left": time.monotonic(), "cpu": time.process_time() - cpu}))
"""


def _meet(members, ranks, idle=2.0, wait=30.0, key=None):
    """members: (local rank, seconds before it comes). Each one's {me, came, left, cpu}."""
    key = key or uuid.uuid4().hex
    procs = [subprocess.Popen([sys.executable, "-c", AT_GATE, key, str(ranks), str(me), str(delay), str(idle),
                               str(wait)], stdout=subprocess.PIPE, text=True) for me, delay in members]
    out = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return out


def test_every_rank_leaves_together_once_the_last_came_and_waited_asleep():
    # the first rank early, one in between, the last a second late; then the first rank last
    for members in ([(0, 0.0), (1, 0.0), (2, 0.3), (3, 1.0)], [(0, 1.0), (1, 0.0), (2, 0.0)]):
        got = _meet(members, len(members))
        last = max(g["came"] for g in got)
        lefts = [g["left"] for g in got]
        assert min(lefts) >= last, got
        assert max(lefts) - last < 0.25, got     # let through at once (a busy 2-core VM: 0.25 s)
        for g in got:
            waited = g["left"] - g["came"]
            # asleep: a rank that waited a second used a few ms of CPU (connect polls every 5 ms)
            assert g["cpu"] < 0.05 + 0.05 * waited, got


def test_a_rank_that_never_comes_costs_the_idle_time_not_a_hang():
    got = _meet([(0, 0.0), (1, 0.0)], ranks=3, idle=0.5)
    last = max(g["came"] for g in got)
    assert all(0.4 < g["left"] - last < 2.0 for g in got), got


def test_without_the_first_rank_the_others_go_on_after_the_idle_time():
    got = _meet([(1, 0.0), (2, 0.0)], ranks=3, idle=0.5)
    assert all(0.4 < g["left"] - g["came"] < 2.0 for g in got), got


def test_a_rank_too_late_for_the_gate_goes_on_after_the_idle_time():
    # rank 0 gave up on rank 2 after 0.5 s idle and let rank 1 through; rank 2 then finds no gate
    got = {g["me"]: g for g in _meet([(0, 0.0), (1, 0.0), (2, 1.5)], ranks=3, idle=0.5)}
    assert got[1]["left"] < got[2]["came"], got
    assert 0.4 < got[2]["left"] - got[2]["came"] < 2.0, got


def test_the_key_is_the_nodes_hydra_proxy_seen_through_a_wrapper_shell():
    exe = mpiexec()
    assert exe, "mpiexec not found next to the test interpreter (pip install mpich)"
    code = ("import json, os; from iodl.launcher import hydra_proxy; "
            "print(json.dumps([hydra_proxy(), open(f'/proc/{hydra_proxy()[0]}/comm').read().strip()]))")
    # a rank started through `sh -c` (its parent is the shell, not the proxy) finds the same proxy
    proc = subprocess.run([exe, "-n", "2", "sh", "-c", '"$0" -c "$1"; true', sys.executable, code],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0][1] == "hydra_pmi_proxy", seen
    from iodl.launcher import hydra_proxy
    assert hydra_proxy() is None   # this test process: no proxy above it


def test_a_second_start_does_not_meet_again(monkeypatch):
    # start_mpi's second call returns the module MPI_Init made; a gate there would wait for ranks
    # that never come (GATE_IDLE_S a call): its guard is that mpi4py.MPI is imported
    import iodl.launcher as launcher
    calls = []
    monkeypatch.setattr(launcher, "_gate_before_init", calls.append)
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", sys.modules.get("mpi4py.MPI") or type(sys)("mpi4py.MPI"))
    monkeypatch.setattr(launcher, "mpi_env_defaults", lambda env: {})
    launcher.start_mpi()
    assert calls == []


# another user's process at the gate's name: binds it and holds it (or connects to it), then sleeps
SQUATTER = """
import _socket, sys, time
s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
name = b"\\0iodl-start-" + sys.argv[1].encode()
if sys.argv[2] == "bind":
    s.bind(name)
    s.listen(8)
else:
    for _ in range(400):
        try:
            s.connect(name)
            break
        except OSError:
            time.sleep(0.005)
print("ready", flush=True)
time.sleep(30)
"""


def _squat(key: str, how: str):
    """A process of user 65534 that binds (how="bind") or connects to the gate named by key."""
    proc = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                             SQUATTER, key, how], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc


@pytest.mark.root
def test_a_gate_another_user_holds_is_not_waited_at():
    # the name is guessable; a gate of another user would otherwise hold every rank for wait_s
    key = uuid.uuid4().hex
    squatter = _squat(key, "bind")
    try:
        assert squatter.stdout.readline() == "ready\n", squatter.stderr.read()
        got = _meet([(1, 0.0), (2, 0.0)], ranks=3, idle=2.0, wait=10.0, key=key)
    finally:
        squatter.kill()
        squatter.wait()
    assert all(g["left"] - g["came"] < 1.0 for g in got), got


@pytest.mark.root
def test_another_users_connection_is_not_a_rank():
    # rank 0 of 2 ranks: another user's process connects first; the gate opens for the real rank 1
    key = uuid.uuid4().hex
    procs = [subprocess.Popen([sys.executable, "-c", AT_GATE, key, "2", "0", "0", "3.0", "30"], stdout=subprocess.PIPE,
                              text=True)]
    time.sleep(0.5)                      # rank 0 is listening
    squatter = _squat(key, "connect")
    try:
        assert squatter.stdout.readline() == "ready\n", squatter.stderr.read()
        time.sleep(0.5)
        procs.append(subprocess.Popen([sys.executable, "-c", AT_GATE, key, "2", "1", "0", "3.0", "30"],
                                      stdout=subprocess.PIPE, text=True))
        got = {g["me"]: g for g in (json.loads(p.communicate(timeout=60)[0]) for p in procs)}
    finally:
        squatter.kill()
        squatter.wait()
    # rank 0 let nobody through on the stranger's connection: it left with rank 1, not before it came
    assert got[0]["left"] >= got[1]["came"] and abs(got[0]["left"] - got[1]["left"]) < 0.25, got
