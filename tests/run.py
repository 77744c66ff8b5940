"""The whole suite in two phases: the tests that do not need the machine to themselves three at a time
(pytest-xdist; three workers on this project's 2-core VMs, as many of these tests wait on a
subprocess or a server: phase 1 took 204 s on two workers, 170 s on three, 165 s on four), then
the `serial` ones (tests/conftest.py says which) on two workers, each test holding
tests/machine_lock.py's lock: alone, or beside one other where both only wait on a throttle
(conftest's SHARES_SLEEP); a file's tests on one worker.
Arguments go to both pytest runs (`-x`, `-k NAME`, `--durations=20`).

    .venv/bin/python tests/run.py

`python -m pytest` alone runs every test one at a time, which takes longer and judges the same claims.
The exit status is pytest's: 0 when both phases pass, 1 when a test failed in either, 2 when stopped.
Both phases' closing lines are printed again at the end, and their sum as the last line.
The tests' directories (tmp_path) of a run are under one directory of its own, /tmp/iodl-suite-*: removed
after a run that passed (in the background), kept and named after one that did not, until the next run
starts (which removes it, in the background): a run leaves ~9.5 GB, and a few failed runs' kept side by
side once filled the CI machine's disk (a checkpoint test then found no room). Removing each passed
test's tmp_path at its end instead (pytest's tmp_path_retention_policy = "failed") puts that cost inside
the tests (20,000 small files take 4 s to remove here): phase 1 took 353 s in the one run that did it,
275-292 s in the three before.
"""
import glob
import os
import re
import stat
import subprocess
import sys
import tempfile
import time

PHASES = (("the tests that share the machine, three at a time", ["-n", "3", "-m", "not serial"]),
          ("the tests that need the machine to themselves, one at a time (two where both wait on a throttle)",
           ["-n", "2", "--dist", "loadfile", "--no-loadscope-reorder", "-m", "serial"]))
# pytest's closing line, e.g. "==== 3 failed, 1875 passed, 10 skipped, 2 not judged in 512.31s (0:08:32) ====",
# without the rules under -q
CLOSING = re.compile(r"^=* ?(\d+ [\w ]+?(?:, \d+ [\w ]+?)*) in [0-9.]+s\b.*$")
COUNT = re.compile(r"(\d+) (\w[\w ]*)")
STOPPED, OK, NO_TESTS = 2, 0, 5   # pytest's exit codes: interrupted, all passed, nothing collected
KEPT = "KEPT"   # in a failed run's directory: the next run removes it


def run_phase(args: list[str]) -> tuple[int, str]:
    """One pytest run, its output passed through as it comes; its exit status and closing line."""
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], stdout=subprocess.PIPE, text=True, bufsize=1)
    closing = ""
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if CLOSING.match(line.strip()):
                closing = line.strip()
        return proc.wait(), closing
    except KeyboardInterrupt:
        # pytest got the same SIGINT (one process group): let it write its partial summary
        for line in proc.stdout:
            sys.stdout.write(line)
        proc.wait()
        return STOPPED, closing


def counts(closing: str) -> dict[str, int]:
    """The outcomes of a closing line; "deselected" left out (each phase deselects the other's tests)."""
    m = CLOSING.match(closing)
    return {word: int(n) for n, word in COUNT.findall(m.group(1)) if word != "deselected"} if m else {}


def exit_status(codes: list[int]) -> int:
    bad = [c for c in codes if c not in (OK, NO_TESTS)]
    # stopped (2) or pytest's own errors (3, 4) say more than a failed test (1)
    return max(bad) if bad else OK if OK in codes else NO_TESTS


def remove_later(scratch: str) -> None:
    """Remove the run's scratch directory in a process of its own, not waited for. pytest's own clean-up
    of its numbered directories deletes whatever an earlier session left once it is the fourth newest, and
    charged that to the session that found it: py-spy caught a phase-1 session ~20 s in that rmtree after
    its last test (phase 1 then ran 192 s against 172-177); whose data took the 20 s was not measured.
    --one-file-system: never into a mount a failed test left behind."""
    subprocess.Popen(["rm", "-rf", "--one-file-system", scratch], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def remove_kept() -> None:
    """Remove what earlier failed runs of this user kept (their directories carry KEPT; a run still
    going has none). /tmp is shared: another user's directory, or a link, is never removed."""
    for kept in glob.glob(os.path.join(tempfile.gettempdir(), "iodl-suite-*", KEPT)):
        st = os.lstat(os.path.dirname(kept))
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            remove_later(os.path.dirname(kept))


def main(argv: list[str]) -> int:
    start, codes, lines, total = time.monotonic(), [], [], {}
    color = ["--color=yes"] if sys.stdout.isatty() else []
    remove_kept()
    # each phase's tmp_path roots under this run's own directory (pytest then cleans up no numbered
    # directory of earlier runs); an argument --basetemp given here comes after it and wins
    scratch = tempfile.mkdtemp(prefix="iodl-suite-")
    for title, opts in PHASES:
        print(f"\n#### iodl's suite, phase {len(codes) + 1} of {len(PHASES)}: {title}", flush=True)
        basetemp = os.path.join(scratch, f"phase{len(codes) + 1}")
        code, closing = run_phase([*opts, f"--basetemp={basetemp}", *color, *argv])
        codes.append(code)
        lines.append(closing or f"(no closing line; pytest exit status {code})")
        for word, n in counts(closing).items():
            total[word] = total.get(word, 0) + n
        if code not in (OK, 1, NO_TESTS):   # stopped, or pytest itself could not run: no second phase
            break
    print()
    for i, line in enumerate(lines, 1):
        print(f"phase {i}: {line}")
    status = exit_status(codes)
    if status in (OK, NO_TESTS):
        remove_later(scratch)
    else:
        open(os.path.join(scratch, KEPT), "w").close()
        print(f"the tests' directories are kept in {scratch} (until the next run starts)")
    summary = ", ".join(f"{n} {word}" for word, n in total.items()) or "no tests ran"
    print(f"==== {summary} in {time.monotonic() - start:.2f}s (both phases) ====")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
