"""Reading the papers' tables, experiments/presets/*.toml, into the preset registry.

PRESETS ({preset name: preset}) and EXPERIMENTS (one row per experiment the papers report,
in table order) are read once, when this module is first imported; the other modules look a
preset up in PRESETS by its name.
"""
import copy
import os
import tomllib

# The repository (this file is experiments/presetlib/loading.py): the tables live in it.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLES = os.path.join(ROOT, 'experiments', 'presets')
PAPERS = ('fedadc', 'fedadc_conf', 'fedfor', 'fedgkd', 'igfl')  # one table each, doc order
NS = 'not stated'


def _cited(item, where):
  """{v, src} -> (value, source); lists become tuples (grids)."""
  if not (isinstance(item, dict) and set(item) == {'v', 'src'} and item['src'].strip()):
    raise ValueError(f'{where}: every value is {{v = ..., src = "..."}}, got {item!r}')
  value = item['v']
  return (tuple(value) if isinstance(value, list) else value), item['src']


def _cited_table(table, where):
  return {k: _cited(x, f'{where}.{k}') for k, x in (table or {}).items()}


def _inherit(name, raw, chain=()):
  """A preset with its `base` preset's entries merged in (setting, grid, methods by key)."""
  if name in chain:
    raise ValueError(f'preset {name}: circular base')
  own = raw[name]
  if 'base' not in own:
    return copy.deepcopy(own)
  out = _inherit(own['base'], raw, chain + (name,))
  # `unset` removes inherited settings only, before the preset's own are merged: a preset that
  # both sets and unsets a field is refused (the own value would silently win or vanish).
  both = sorted(set(own.get('unset', ())) & set(own.get('setting', {})))
  if both:
    raise ValueError(f'preset {name}: both sets and unsets {", ".join(both)}; unset only '
                     'removes a value inherited from its base: drop one of the two')
  for field in own.get('unset', ()):
    if field not in out['setting']:
      raise ValueError(f'preset {name}: unset names {field}, which its base does not set')
    out['setting'].pop(field)
  for key, value in own.items():
    if key in ('setting', 'grid', 'methods') or (key == 'scenarios' and
                                                  own.get('extend_scenarios')):
      out[key] = {**out.get(key, {}), **value}
    elif key not in ('base', 'extend_scenarios'):
      out[key] = copy.deepcopy(value)
  if 'methods_only' in own:
    out['methods'] = {label: out['methods'][label] for label in own['methods_only']}
  out.setdefault('notes', [])
  return out


def _normalise(name, p):
  """The in-memory preset: values as (value, source) pairs, scenario extras apart."""
  w = f'presets.{name}'
  scenarios, extra = {}, {}
  for s, table in p['scenarios'].items():
    table = dict(table)
    extra[s] = {'methods': {lab: _cited_table(t, f'{w}.scenarios.{s}.methods.{lab}')
                            for lab, t in table.pop('methods', {}).items()},
                'pending': table.pop('pending', ''), 'issue': table.pop('issue', '')}
    scenarios[s] = _cited_table(table, f'{w}.scenarios.{s}')
  methods = {}
  for label, m in p['methods'].items():
    methods[label] = {'algo': m['algo'], 'set': _cited_table(m.get('set'), f'{w}.{label}.set'),
                      'grid': _cited_table(m.get('grid'), f'{w}.{label}.grid'),
                      'pending': m.get('pending', ''), 'issue': m.get('issue', ''),
                      'sweep': m.get('sweep', True)}
  short = dict(p['short'])
  short['scenarios'] = tuple(short.get('scenarios', scenarios))
  return {'name': name, 'title': p['title'], 'paper': p['paper'], 'metric': p['metric'],
          'setting': _cited_table(p['setting'], f'{w}.setting'),
          'seeds': _cited(p['seeds'], f'{w}.seeds'),
          'grid': _cited_table(p.get('grid'), f'{w}.grid'), 'scenarios': scenarios,
          'scenario_extra': extra, 'methods': methods, 'short': short,
          'notes': list(p.get('notes', [])), 'pipeline': p['pipeline'],
          'pending': p.get('pending', ''), 'issue': p.get('issue', ''),
          'report_rounds': tuple(p.get('report_rounds', ()))}


def load(directory=TABLES):
  """Every paper table: ({preset name: preset}, [experiment rows in table order])."""
  raw, rows = {}, []
  for paper in PAPERS:
    with open(os.path.join(directory, f'{paper}.toml'), 'rb') as f:
      table = tomllib.load(f)
    for name, p in table.get('presets', {}).items():
      if name in raw:
        raise ValueError(f'preset {name} is defined twice')
      raw[name] = dict(p, paper=table['paper'])
    rows += [dict(e, id=eid, paper=table['paper'], short_paper=table['short'])
             for eid, e in table.get('experiments', {}).items()]
  presets = {name: _normalise(name, _inherit(name, raw)) for name in raw}
  for row in rows:
    for name in row['presets']:
      if name not in presets:
        raise ValueError(f'experiment {row["id"]} names an unknown preset {name}')
  return presets, rows


PRESETS, EXPERIMENTS = load()
