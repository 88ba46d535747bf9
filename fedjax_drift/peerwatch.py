"""One line, not a C++ abort, when a peer of a multi-process run dies (docs/scale.md, "More
processes and machines").

When a process of a jax.distributed run dies, JAX's runtime ends every other process from C++:
a dead worker is reported by the coordination service after the heartbeat timeout, a dead
process 0 (the coordinator) at once, and each survivor then aborts with a fatal log line and a
stack trace (this jax's Python API cannot replace that handler: a Python
missed_heartbeat_callback fails with std::bad_cast when it is called).

So a multi-process run sends its standard error through this small watcher, a separate
process started by distributed.watch_stderr before jax.distributed.initialize. The watcher
passes every byte on at once, except the runtime's own log lines (glog format, the abort's
stack trace), which it holds back. When the run's process ends:
  - if the held lines show that a peer died (a task that stopped sending heartbeats, an
    unreachable coordinator), it writes one line naming the dead process instead of them;
  - otherwise, if the run wrote an `error:` line of its own, the held lines are dropped (the
    run's line says what happened); else they are written out unchanged, at the end.

This file imports nothing from jax or fedjax_drift, so the watcher starts in milliseconds:
`python peerwatch.py PROCESS_ID HEARTBEAT_S` reads the run's standard error on stdin and
writes to its own standard error (the terminal's).
"""
import os
import re
import signal
import sys

# The runtime's log lines: glog ('E1123 23:07:17.671406   29318 file.cc:1520] ...'), absl's
# fatal stack trace, and C++ terminate messages.
RUNTIME_LINE = re.compile(rb'^([IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^ ]+:\d+\]|\*\*\* |'
                          rb'    @ +0x|terminate called|  what\(\):)')
GLOG = re.compile(rb'[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^ ]+:\d+\]')
FATAL = (b'Terminating process because', b'Check failure stack trace', b'terminate called')


def peer_failure_line(status: str, me: int, heartbeat_s: int) -> str:
  """The one line for a process of a run whose peer died, from the runtime's log text, or ''
  when the text names no dead peer."""
  dead = re.search(r'stopped sending heartbeats\)?:\s*([\d,\s]+)', status) or \
      re.search(r'[Tt]ask (\d+) heartbeat timeout', status)
  if dead:
    ids = sorted({int(t) for t in re.findall(r'\d+', dead.group(1))} - {me})
    if ids:
      return (f'error: process {", ".join(map(str, ids))} of this multi-process run stopped '
              f'(no heartbeat for {heartbeat_s}s); process {me} ended too')
  if me != 0 and re.search(r'Failed to send RPC to coordination service|leader task', status):
    return (f'error: process 0 of this multi-process run (the coordinator) stopped or cannot '
            f'be reached; process {me} ended too')
  return ''


def runtime_failure_line(text: str, me: int) -> str:
  """The one line for any other fatal end by the runtime: its status, shortened."""
  fatal = re.search(r'^F\d{4} [^\]]*\] (.*)$', text, re.M)
  status = re.search(r'absl::Status: (.*)$', text, re.M)
  why = (status or fatal).group(1) if (status or fatal) else 'a fatal error'
  hint = (' (a duplicate --process_id?)' if 'RegisterTask' in text or 'already' in text
          else '')
  return (f'error: JAX\'s distributed runtime ended process {me}{hint}: '
          f'{why.strip()[:300]}')


def watch(source, sink, me, heartbeat_s):
  """Copies source to sink (binary files) as described in the module docstring; returns the
  one line written for a dead peer, or ''."""
  held, in_runtime, ours_failed, line = [], False, False, b''
  while True:
    chunk = os.read(source.fileno(), 65536)
    if not chunk:
      break
    *complete, line = (line + chunk).split(b'\n')
    for part in complete:
      glued = GLOG.search(part)  # a runtime line written after a progress bar's '\r' text
      if glued and glued.start() > 0:
        sink.write(part[:glued.start()])
        part = part[glued.start():]
      # A runtime line, or the continuation of one (its messages span lines), is held.
      in_runtime = bool(RUNTIME_LINE.match(part)) or (
          in_runtime and not part.startswith((b'error:', b'warning:', b'\r')))
      if in_runtime:
        held.append(part + b'\n')
        continue
      ours_failed |= part.startswith(b'error:')
      sink.write(part + b'\n')
      sink.flush()
    if b'\r' in line and not RUNTIME_LINE.match(line):  # a progress bar's updates: on at once
      sink.write(line)
      sink.flush()
      line = b''
  if line:
    (held.append if in_runtime or RUNTIME_LINE.match(line) else sink.write)(line)
  text = b''.join(held)
  found = ''
  if any(f in text for f in FATAL):
    decoded = text.decode('utf-8', 'replace')
    found = peer_failure_line(decoded, me, heartbeat_s)
    if not found and not ours_failed:
      found = runtime_failure_line(decoded, me)
  if found:
    sink.write(found.encode() + b'\n')
  elif held and not ours_failed:
    sink.write(text)
  sink.flush()
  return found


def main(argv):
  for name in ('SIGINT', 'SIGTERM', 'SIGHUP'):  # the run handles them; the watcher ends at EOF
    signal.signal(getattr(signal, name), signal.SIG_IGN)
  watch(sys.stdin.buffer, sys.stderr.buffer, int(argv[1]), int(argv[2]))


if __name__ == '__main__':
  main(sys.argv)
