"""The valid values of the main flags, with one line each (`experiments/run.py --list`)."""
from fedjax_drift import registry
from fedjax_drift.data import sources


def _registered(kind):
  """{shown name: summary} of a registry kind's selectable entries (no INTERNAL ones); a prefix
  entry shows its summary's first word (file:PATH) and the rest of the summary after the
  comma."""
  out = {}
  for name, entry in registry.entries(kind).items():
    if entry.info == registry.INTERNAL:
      continue
    if entry.prefix:
      shown, _, summary = entry.summary.partition(', ')
      out[shown] = summary
    else:
      out[name] = entry.summary
  return out


def _title(kind):
  """The --list heading of a registry kind: registry.KINDS' words without their aside."""
  return 'local terms' if kind == 'part' else registry.KINDS[kind][1].split(' (')[0]


def sections():
  """[(title, flag, {value: one-line summary})] for every registry kind in registry.KINDS
  order: algorithms, local terms, aggregators, server optimizers, ..., models, datasets."""
  return [(_title(kind), flag, sources.datasets() if kind == 'dataset' else _registered(kind))
          for kind, (flag, _) in registry.KINDS.items()]


def values(flag):
  """The valid values of --flag as listed by sections(), or None if it has no section."""
  for _, name, entries in sections():
    if name == flag:
      return tuple(entries)
  return None


def text():
  """The --list output: a heading per section, then one `name  summary` line per value."""
  lines = []
  for title, flag, entries in sections():
    lines.append(f'{title} (--{flag}):')
    width = max(len(n) for n in entries)
    lines += [f'  {n:{width}s}  {s}'.rstrip() for n, s in entries.items()]
  return '\n'.join(lines)
