#!/usr/bin/env python3
"""Stages of each broadcast push's way to its first recipient, from a
system-wide `perf script` of system calls (first-recipient-trace.sh).

Per push (the pusher's write of at least 120 bytes: a POST with its body;
the client's metrics scrapes are shorter):
  write -> wake   the pusher's write to the server thread's wake-up
                  (its epoll_wait returning before its read)
  wake -> read    to that thread's read of the push returning
  read -> send    to the server's first send (`sendto` of 16 bytes or
                  more, or `writev`)
  send -> rwake   to the recipient thread's wake-up
  rwake -> rread  to the recipient's read returning
and two sums: from the server's read (what the issue-18 target counts
from, "the publish being accepted", which comes after that read) and
from the pusher's write (loadtest's own first-recipient figure less its
parse of the frame). The first push (the scenario's warm-up)
is shown but not in the medians.

Usage: first-recipient-stages.py EVENTS --server PIDS --pusher PID --recipients PIDS
"""

import argparse
import re
import statistics
import sys

LINE = re.compile(r"\s*(.+?)\s+(\d+)/(\d+)\s+([\d.]+):\s+\S+?:(\S+):\s*(.*)")
ARG = re.compile(r"(\w+): (0x[0-9a-f]+)")
RET = re.compile(r"0x([0-9a-f]+)\s*$")
WAKES = ("sys_exit_epoll_wait", "sys_exit_epoll_pwait")
SENDS = ("sys_enter_sendto", "sys_enter_writev")
PUSH_MIN = 120
FRAME_MIN = 16
# A push's first recipient must come within this of its write (µs), else
# the push is counted as not found (say, events lost by perf).
WINDOW_US = 20_000


class Event:
    __slots__ = ("t", "pid", "tid", "name", "args", "ret")

    def __init__(self, t, pid, tid, name, rest):
        self.t = t
        self.pid = pid
        self.tid = tid
        self.name = name
        self.args = {k: int(v, 16) for k, v in ARG.findall(rest)}
        ret = RET.search(rest) if name.startswith("sys_exit") else None
        self.ret = int(ret.group(1), 16) if ret else None


def read_events(path):
    events = []
    with open(path, errors="replace") as lines:
        for line in lines:
            m = LINE.match(line)
            if m:
                _comm, pid, tid, t, name, rest = m.groups()
                events.append(Event(float(t) * 1e6, int(pid), int(tid), name, rest))
    events.sort(key=lambda e: e.t)
    return events


def is_send(e):
    if e.name not in SENDS:
        return False
    size = e.args.get("len")
    return size is None or size >= FRAME_MIN  # writev: no size in its args


def last_wake(events, lo, hi, tid):
    """The time of `tid`'s last epoll wake-up in events[lo:hi], or None."""
    for k in range(hi - 1, lo - 1, -1):
        if events[k].tid == tid and events[k].name in WAKES:
            return events[k].t
    return None


def stages(events, server, pusher, recipients):
    """One row per push (None where a stage was not found in time)."""
    n = len(events)

    def find(start, t0, wanted):
        for k in range(start, n):
            if events[k].t - t0 >= WINDOW_US:
                return None
            if wanted(events[k]):
                return k
        return None

    def is_push(e):
        return e.pid == pusher and e.name == "sys_enter_sendto" and e.args.get("len", 0) >= PUSH_MIN

    def is_push_read(e):
        return e.pid in server and e.name == "sys_exit_recvfrom" and (e.ret or 0) >= PUSH_MIN

    def is_frame_read(e):
        return e.pid in recipients and e.name == "sys_exit_recvfrom" and (e.ret or 0) > 0

    rows = []
    i = 0
    while i < n:
        if not is_push(events[i]):
            i += 1
            continue
        t0 = events[i].t
        j = find(i + 1, t0, is_push_read)
        q = None if j is None else find(j + 1, t0, lambda e: e.pid in server and is_send(e))
        r = None if q is None else find(q + 1, t0, is_frame_read)
        if r is None:
            rows.append(None)
            i += 1
            continue
        read, send, got = events[j], events[q], events[r]
        rows.append(
            {
                "write": t0,
                "server wake": last_wake(events, i, j, read.tid),
                "server read": read.t,
                "first send": send.t,
                "recipient wake": last_wake(events, q, r, got.tid),
                "recipient read": got.t,
            }
        )
        i = r + 1
    return rows


def span(row, a, b):
    if row[a] is None or row[b] is None:
        return None
    return row[b] - row[a]


COLUMNS = [
    ("write->wake", "write", "server wake"),
    ("wake->read", "server wake", "server read"),
    ("read->send", "server read", "first send"),
    ("send->rwake", "first send", "recipient wake"),
    ("rwake->rread", "recipient wake", "recipient read"),
    ("from read", "server read", "recipient read"),
    ("from write", "write", "recipient read"),
]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("events")
    p.add_argument("--server", required=True, help="the server's pids, comma-separated")
    p.add_argument("--pusher", required=True, type=int, help="the load client's pid (its pusher)")
    p.add_argument("--recipients", required=True, help="the load client's worker pids, comma-separated")
    a = p.parse_args()
    server = {int(x) for x in a.server.split(",") if x}
    recipients = {int(x) for x in a.recipients.split(",") if x}
    rows = stages(read_events(a.events), server, a.pusher, recipients)
    if not rows:
        sys.exit("first-recipient-stages: no push found in the trace")
    print("µs      " + " ".join("%12s" % c[0] for c in COLUMNS))
    fmt = lambda v: "%12.0f" % v if v is not None else "%12s" % "?"
    for k, row in enumerate(rows):
        label = "warm-up" if k == 0 else "push %d" % k
        if row is None:
            print("%-8s no first recipient found within %d µs" % (label, WINDOW_US))
            continue
        print("%-8s" % label + " ".join(fmt(span(row, x, y)) for _, x, y in COLUMNS))
    counted = [r for r in rows[1:] if r is not None]
    print("medians of %d pushes (warm-up left out; %d not found):" % (len(counted), rows[1:].count(None)))
    for name, x, y in COLUMNS:
        values = [v for v in (span(r, x, y) for r in counted) if v is not None]
        if values:
            print("  %-13s %6.0f µs (%.0f-%.0f)" % (name, statistics.median(values), min(values), max(values)))


if __name__ == "__main__":
    main()
