"""Rank 0's live view of a run: per-mount MB/s, elapsed and remaining.

Every rank's engine adds what it completes to its slot of a block of memory shared by the
ranks of its node (metrics.LIVE_*), so rank 0 reads its node's progress without a single MPI
message and without waking anyone: 72 ranks on 2 cores pay nothing for it. Ranks on other
nodes are not seen; the view says so when the job spans several hosts.

On a terminal the view is a rich Live table redrawn every second and removed at the end. Told
to show progress with no terminal (a log), it prints one plain line every `interval` seconds.
"""
from __future__ import annotations

import os
import shutil
import sys
import textwrap
import threading
import time

import numpy as np

from .metrics import LIVE_BYTES, LIVE_CACHED, LIVE_IOS, LIVE_SLOT, LIVE_STEPS
from .reduce import MB, hit_fraction


class Progress:
    WINDOW_S = 3.0   # MB/s over the last few seconds: one second of a bursty mount jumps about

    def __init__(self, block, node_mounts: list[int], mount_paths: list[str], total_s: float = 0.0,
                 total_steps: int = 0, other_nodes: bool = False, console=None, interval: float = 1.0):
        self.live = np.frombuffer(block, dtype=np.int64).reshape(-1, LIVE_SLOT // 8)[:len(node_mounts)]
        self.node_mounts = np.asarray(node_mounts)
        self.paths, self.total_s, self.total_steps = mount_paths, total_s, total_steps
        self.other_nodes, self.console, self.interval = other_nodes, console, interval
        self._history: list[tuple[float, np.ndarray]] = []
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._live = self._thread = None

    def snapshot(self) -> tuple[float, np.ndarray, int]:
        """(seconds since start, per-mount [bytes, ios, cached] read so far, fewest steps of a rank)."""
        counts = np.zeros((len(self.paths), 3), dtype=np.int64)
        rows = self.live[:, [LIVE_BYTES, LIVE_IOS, LIVE_CACHED]].copy()
        np.add.at(counts, self.node_mounts, rows)
        return time.monotonic() - self._t0, counts, int(self.live[:, LIVE_STEPS].min()) if len(self.live) else 0

    def rates(self) -> tuple[float, np.ndarray, np.ndarray, int]:
        """(elapsed, per-mount MB/s over the last WINDOW_S, per-mount totals, steps done)."""
        now, counts, steps = self.snapshot()
        self._history.append((now, counts))
        while len(self._history) > 2 and now - self._history[1][0] >= self.WINDOW_S:
            self._history.pop(0)
        then, before = self._history[0]
        span = now - then
        mbps = (counts[:, 0] - before[:, 0]) / span / MB if span > 0 else np.zeros(len(self.paths))
        return now, mbps, counts, steps

    def remaining(self, elapsed: float, steps: int) -> str:
        if self.total_s:
            return f"{max(self.total_s - elapsed, 0.0):,.0f} s"
        if self.total_steps and steps:
            return f"~{elapsed / steps * max(self.total_steps - steps, 0):,.0f} s"
        return "?"

    def _steps(self, steps: int) -> str:
        return f", step {steps}/{self.total_steps}" if self.total_steps else ""

    def render(self):
        from rich.table import Table

        elapsed, mbps, counts, steps = self.rates()
        where = " (this node's ranks)" if self.other_nodes else ""
        table = Table(title=f"iodl: {elapsed:,.0f} s elapsed, remaining {self.remaining(elapsed, steps)}"
                            f"{self._steps(steps)}{where}")
        for col in ("mount", "MB/s", "read GB", "requests", "cache hit"):
            table.add_column(col, justify="left" if col == "mount" else "right")
        for m, path in enumerate(self.paths):
            b, ios, cached = counts[m]
            table.add_row(path, f"{mbps[m]:,.1f}", f"{b / 1e9:,.3f}", f"{ios:,}",
                          f"{100 * hit_fraction(b, cached):.1f}%" if b else "-")
        return table

    def line(self) -> str:
        elapsed, mbps, _counts, steps = self.rates()
        mounts = ", ".join(f"{p} {r:,.1f} MB/s" for p, r in zip(self.paths, mbps))
        return f"iodl: {elapsed:,.0f} s, {mounts}, remaining {self.remaining(elapsed, steps)}{self._steps(steps)}"

    def start(self) -> "Progress":
        if self.console is not None and self.console.is_terminal:
            from rich.live import Live

            self._live = Live(get_renderable=self.render, console=self.console, refresh_per_second=1 / self.interval,
                              transient=True)
            self._live.start()
        else:
            self._thread = threading.Thread(target=self._print_lines, daemon=True, name="iodl-progress")
            self._thread.start()
        return self

    def _print_lines(self) -> None:
        self.rates()  # the first reading: rates need two
        while not self._stop.wait(self.interval):
            print(wrap(self.line()), flush=True)   # a log line within the console width

    def stop(self) -> None:
        self._stop.set()
        if self._live is not None:
            self._live.stop()
        if self._thread is not None:
            self._thread.join(timeout=2)


def console_width() -> int:
    """COLUMNS, else the terminal's width, else 80 (a pipe, a log)."""

    return shutil.get_terminal_size((80, 24)).columns


def wrap(line: str) -> str:
    """A plain line folded at spaces to the console width (for print(), which does not wrap)."""

    return textwrap.fill(line, console_width(), break_long_words=False, break_on_hyphens=False) or line


def _duration(s: float) -> str:
    s = int(round(max(s, 0.0)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Ticker:
    """Progress of one long piece of work (generate's bytes, a sweep point's seconds).

    On a terminal one line redrawn in place (at most `redraw` times a second) with what is done,
    the rate and the time left; it is erased by close(). Otherwise (a pipe, a log) one plain line
    at most every `every` seconds (IODL_PROGRESS_EVERY overrides it), so logs are not flooded.
    """

    def __init__(self, label: str, total: float = 0.0, unit: str = "MB", scale: float = 1e6, stream=None,
                 tty: bool | None = None, every: float = 10.0, redraw: float = 0.25, clock=time.monotonic):

        self.label, self.total, self.unit, self.scale = label, float(total), unit, scale
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        env = os.environ.get("IODL_PROGRESS_EVERY")
        try:
            self.every = float(env) if env else every
        except ValueError:
            self.every = every
        self.redraw, self.clock = redraw, clock
        self.t0 = clock()
        self._last = None if self.tty else self.t0   # logs: the first line after `every`, not at once
        self._shown = False
        self.done = 0.0

    def text(self, done: float, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        elapsed = now - self.t0
        rate = done / elapsed if elapsed > 0 else 0.0
        parts = [f"{self.label}: {done / self.scale:,.1f}"]
        if self.total:
            parts[0] += f" of {self.total / self.scale:,.1f} {self.unit} ({100 * min(done / self.total, 1):.0f}%)"
        else:
            parts[0] += f" {self.unit}"
        parts.append(f"{rate / self.scale:,.1f} {self.unit}/s")
        if self.total and rate > 0:
            parts.append(f"ETA {_duration((self.total - done) / rate)}")
        elif self.total:
            parts.append("ETA ?")
        parts.append(f"{_duration(elapsed)} elapsed")
        line = ", ".join(parts)
        width = console_width() - 1
        while len(line) > width and len(parts) > 1:   # what matters most stays: the label and the share done
            parts.pop()
            line = ", ".join(parts)
        return line

    def update(self, done: float) -> None:
        self.done = done
        now = self.clock()
        wait = self.redraw if self.tty else self.every
        if self._last is not None and now - self._last < wait:
            return
        self._last = now
        self._emit(self.text(done, now))

    def _emit(self, line: str) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
            self._shown = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Erase the terminal line (the caller prints the final summary)."""
        if self.tty and self._shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._shown = False


class Clock:
    """A Ticker of seconds for work that reports no progress of its own (a sweep point): a
    thread updates it on a terminal; on a log it stays silent (the caller prints a line per step)."""

    def __init__(self, label: str, expected_s: float = 0.0, stream=None, tty: bool | None = None):
        self.ticker = Ticker(label, total=expected_s, unit="s", scale=1.0, stream=stream, tty=tty)
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self) -> "Clock":
        if self.ticker.tty:
            self._thread = threading.Thread(target=self._run, daemon=True, name="iodl-clock")
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.ticker.redraw):
            t = self.ticker
            elapsed = t.clock() - t.t0
            line = f"{t.label}: {_duration(elapsed)} elapsed"
            if t.total:
                line += (f", ~{_duration(t.total - elapsed)} left if as long as the last point" if elapsed < t.total
                         else f", longer than the last point ({_duration(t.total)})")
            t._emit(line[:console_width() - 1])

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.ticker.close()
