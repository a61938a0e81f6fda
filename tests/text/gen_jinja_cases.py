#!/usr/bin/env python3
"""Regenerate tests/text/test_jinja_cases.h: edge-case templates with the output Python jinja2
renders for them under transformers' chat-template environment (jinja_hf_env.py). The expected
strings come from jinja2 itself, never from muse. Needs python3 + jinja2 3.1.x.
   python3 tests/text/gen_jinja_cases.py > tests/text/test_jinja_cases.h"""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jinja2
from jinja_hf_env import render

CTX = {"messages": [{"role": "user", "content": "Hi \u00e9 \u4f60"}, {"role": "assistant", "content": None}],
       "d": {"b": 1, "a": [1, 2.5, None, True, "x'y"], "items": "key-items"}, "s": "  Hello World \u00a0\n",
       "n": 7, "f": 0.1, "small": 1.5e-05, "neg": -3, "e": [], "t": True, "u": "\u00e9\u4f60\U0001F600"}
CASES = [
 "{{ d }}", "{{ d.a }}", "{{ d.a|string }}", "{{ none }}|{{ true }}|{{ false }}", "{{ 3/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7%3 }} {{ 7%-3 }} {{ 2**10 }}",
 "{{ d|tojson }}", "{{ d|tojson(indent=2) }}", "{{ u|tojson }}", "{{ u|tojson(ensure_ascii=True) }}", "{{ s|tojson }}", "{{ e|tojson(indent=2) }}",
 "{{ d|tojson(sort_keys=True) }}", "{{ d|tojson(separators=(',', ':')) }}", "{{ {'a': {}}|tojson(indent='\t') }}",
 "{{ s|trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' H') }}",
 "{{ s.split() }}", "{{ 'a,b,,c'.split(',') }}", "{{ 'a,b,c'.split(',', 1) }}", "{{ 'a b  c'.rsplit(None, 1) }}", "{{ 'a,b,c'.rsplit(',', 1) }}",
 "{{ u[0] }}{{ u[-1] }}{{ u[1:] }}{{ u[::-1] }}|{{ u|length }}", "{{ d.a[1:3] }} {{ d.a[::-1] }} {{ d.a[-2:] }} {{ d.a[:-1] }} {{ d.a[5:] }}",
 "{{ 'x' in 'xyz' }} {{ 1 in d.a }} {{ 'b' in d }} {{ 'q' not in d }}", "{{ 'a' ~ 1 ~ none ~ true }}",
 "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.previtem is defined }}{{ loop.nextitem is defined }}|{% endfor %}",
 "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "{% for k in d %}{{ k }}{% endfor %}", "{% for c in 'ab' %}{{ c }}{% else %}none{% endfor %}{% for c in e %}x{% else %}empty{% endfor %}",
 "{% for i in range(10) if i is odd %}{{ i }}{{ loop.last }}{% endfor %}", "{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
 "{% for i in range(5) %}{% if i is even %}{% continue %}{% endif %}{{ i }}{% endfor %}",
 "{% set ns = namespace(x=1, l=[]) %}{% for i in range(3) %}{% set ns.x = ns.x + i %}{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.x }}{{ ns.l }}",
 "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", "{% if true %}{% set y = 5 %}{% endif %}{{ y }}",
 "{% macro m(a, b=2, c='z') %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 3) }}{{ m(1, c='q') }}{{ m() }}",
 "{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(4) }}",
 "{% set v %}  block {{ n }} {% endset %}[{{ v }}]", "{% filter upper %}hello {{ n }}{% endfilter %}",
 "  {% if true %}\n    yes\n  {% endif %}\n  {{ n }}\n  {#- c #}\nend\n", "a  {%- if true -%}  b  {%- endif -%}  c", "{%+ if true %}x{% endif %}\n{{ 1 }} {{- 2 }} {{ 3 -}} \n {{ 4 }}",
 "{# comment #}\n{{ 1 }}\n{# two\nlines #}\n  {# indented #}\nx", "line1\n{% raw %}{{ not }} {% x %}{% endraw %}\nline2",
 "{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|map(attribute='role')|join(', ') }} {{ messages|rejectattr('content')|list|length }}",
 "{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=True) }} {{ [3,1]|sort(reverse=True) }}",
 "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ d|dictsort }} {{ [1,2,3]|first }}{{ [1,2,3]|last }} {{ [1, 5, 3]|max }}{{ [4,2]|min }} {{ [1,2.5]|sum }}",
 "{{ 'abc'|upper }} {{ 'ABC'|lower }} {{ 'hello world'|title }} {{ 'hELLO'|capitalize }} {{ 'aXa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }}",
 "{{ 'a\nb\n\nc'|indent }}|{{ 'a\nb\n'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'x'|indent(first=true) }}",
 "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ '3.5'|float }} {{ -3|abs }} {{ 2.5|round }} {{ 3.14159|round(2) }}",
 "{{ undefined_thing|default('dflt') }} {{ none|default('x') }} {{ ''|default('y', true) }} {{ d.missing is defined }} {{ d.missing }}|",
 "{{ n is number }} {{ t is boolean }} {{ t is number }} {{ n is integer }} {{ f is float }} {{ 'a' is string }} {{ d is mapping }} {{ e is iterable }} {{ 'x' is iterable }} {{ n is iterable }} {{ undefined_x is iterable }} {{ d is sequence }} {{ none is none }} {{ t is true }} {{ 0 is false }}",
 "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}",
 "{{ 'x' if false }}|{{ 'y' if true else 'z' }}|{{ 1 and 'a' }}|{{ 0 or 'b' }}|{{ not [] }}", "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ [1, (2, 3)] }}",
 "{{ {'a': 1, 'b': [1, {'c': None}]} }}", "{{ 'it\\'s' }} {{ \"q\\\"uote\" }} {{ ['it\\'s', 'say \"hi\"', 'both \\' \"'] }} {{ ['tab\\tnl\\n', '\\x01', '\u00a0', '\u200b', '\u00e9'] }}",
 "{{ '%s and %d'|format('x', 3) }} {{ '%s-%s' % ('a', 'b') }} {{ 'a' * 3 }} {{ [1] * 2 }}",
 "{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.rfind('c') }} {{ 'abcabc'.count('b') }} {{ '-'.join(['a', 'b']) }} {{ 'ab'.replace('', '-') }}",
 "{{ d.get('b') }} {{ d.get('zz') }} {{ d.get('zz', 'dd') }} {{ d.keys()|list }} {{ d.values()|list|length }} {{ d['items'] }} {{ d.items is defined }}",
 "{{ messages[0].content }} {{ messages[1].content }} {{ messages[5] is defined }} {{ messages[-1]['role'] }} {{ messages.0.role }}",
 "{{ strftime_now('%Y-%m-%d %A %b %B %d %H:%M') }}", "{% set a, b = [1, 2] %}{{ a }}{{ b }}", "{{ 1, 2 }}", "{{ 'a' 'b' }}",
 "{{ n|string + 'x' }} {{ n ~ '' }} {{ [1]|string }} {{ none|string }} {{ true|string }}",
 "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }}", "{{ dict(a=1, b=2) }}", "{{ d|items|list }}",
 "{{ messages|selectattr('content', 'none')|list|length }} {{ [1, 2, 3]|select('odd')|list }} {{ [1, 2, 3]|reject('odd')|list }} {{ ['a', 'b']|map('upper')|list }}",
 "{{ [{'x': {'y': 1}}, {'x': {'y': 2}}]|map(attribute='x.y')|list }} {{ [{'n': 'b'}, {'n': 'a'}]|sort(attribute='n')|map(attribute='n')|join }}",
 "{{ 'abc'|list }} {{ 'hello world foo'|wordcount }} {{ 'x'|center(5) }}|{{ [1,2,3]|reverse|list }} {{ 'abc'|reverse }}",
 "{{ n > 5 and n < 10 }} {{ -n }} {{ +n }} {{ -f }} {{ n - 10 }} {{ 2 * 3.0 }} {{ 10 / 4 }} {{ 1 + true }}",
 "{{ 'é'|upper }} {{ 'ÀÉ'|lower }}",
 # errors
 "{{ d.missing.deeper }}", "{{ 'a' + 1 }}", "{{ none + 'a' }}", "{% for x in none %}{% endfor %}", "{{ raise_exception('custom msg') }}", "{{ e.append(1) }}",
 "{{ 1 / 0 }}", "{{ [1]|from_json }}", "{{ undefined_var + 1 }}", "{{ undefined_var.x }}", "{{ undefined_var['x'] }}", "{{ n|length }}", "{{ d|tojson }}{{ (undefined_var)|tojson }}",
 "{% if %}", "{% for %}", "{{ 1 +  }}", "{% endif %}", "{% if true %}", "{{ 'unterminated }}", "{% foo %}", "{{ (1 }}", "{% macro m() %}{% endmacro %}{{ m(1) }}",
 "{{ messages|map(attribute='role')|tojson }}", "{{ (messages|selectattr('role'))|length }}", "{{ 'x' in none }}", "{{ 1 in 'abc' }}",
]
CASES.append("{{ f }} {{ small }} {{ 1.0 }} {{ 100.0 }} {{ 1e20 }} {{ 0.000123 }} {{ 123456789.123 }} {{ 1/3 }} {{ 2.0**60 }}")
# the loop object outlives its loop (kept in a namespace); the macro's loops reuse the stack it had
CASES.append("{% set ns = namespace(l=none) %}{% for x in [1,2,3] %}{% set ns.l = loop %}{% endfor %}{% macro m() %}{% for y in [7,8,9,10,11] %}{% for z in [1] %}{% endfor %}{% endfor %}{% endmacro %}{{ m() }}{{ ns.l.index }} {{ ns.l.last }} {{ ns.l.length }} {{ ns.l.first }}")

def c_str(s):
    out = '"'
    for ch in s.encode('utf-8'):
        c = chr(ch)
        if c == '\\': out += '\\\\'
        elif c == '"': out += '\\"'
        elif c == '\n': out += '\\n'
        elif c == '\t': out += '\\t'
        elif 32 <= ch < 127: out += c
        else: out += '\\%03o' % ch
    return out + '"'

ctx = dict(CTX)
ctx.update(tools=None, documents=None, add_generation_prompt=False, bos_token='', eos_token='')
print('/* GENERATED by tests/text/gen_jinja_cases.py with Python jinja2 %s; do not edit. */' % jinja2.__version__)
print('static const char jinja_case_context[] = %s;' % c_str(json.dumps(CTX, ensure_ascii=False)))
print('static const struct { const char *src; int ok; const char *want; } jinja_cases[] = {')
for src in CASES:
    st, want = render(src, ctx)
    print('    {%s, %d, %s},' % (c_str(src), st == 'ok', c_str(want)))
print('};')
