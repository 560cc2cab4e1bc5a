import { GoInt, GoStruct, GoStructType, GoTemplate, GoTemplateError, formatGoFloat, goJsonMarshal, goSprintf, withGoMethods } from './go-template';

const run = (src: string, data: unknown = {}) => new GoTemplate(src).execute(data);
const parseError = (src: string) => {
  try {
    new GoTemplate(src);
  } catch (e) {
    expect(e).toBeInstanceOf(GoTemplateError);
    return (e as Error).message;
  }
  throw new Error('parsed');
};
const execError = (src: string, data: unknown = {}) => {
  try {
    run(src, data);
  } catch (e) {
    expect(e).toBeInstanceOf(GoTemplateError);
    return (e as Error).message;
  }
  throw new Error('executed');
};

const POINT = new GoStructType('main.Point', [
  { name: 'X', json: 'x' },
  { name: 'Y', json: 'y', omitempty: true },
  { name: 'Label', json: 'label', omitempty: true },
]);
const NAMED = new GoStructType('main.Named', [{ name: 'Name', json: 'name' }], { string: (v) => `<${String(v.values.Name)}>` });

describe('Go text/template: lexing and parsing', () => {
  it('copies text and trims around trim markers', () => {
    expect(run('a  {{- "b" -}}  \n c')).toBe('abc');
    expect(run('a  {{ "b" -}} \t\r\n c')).toBe('a  bc');
    expect(run('a \n {{- "b" }} c')).toBe('ab c');
    expect(run('{{-3}}')).toBe('-3');
    expect(run('x {{- 3 }}')).toBe('x3');
  });

  it('drops comments, with their trim markers', () => {
    expect(run('a {{/* c */}} b')).toBe('a  b');
    expect(run('a {{- /* c\n more */ -}} b')).toBe('ab');
    expect(parseError('{{/* x */ }}')).toBe('template: :1: comment ends before closing delimiter');
    expect(parseError('{{/* x')).toBe('template: :1: unclosed comment');
  });

  it('reads literals: strings with Go escapes, raw strings, numbers, chars, booleans', () => {
    expect(run('{{ "a\\tb\\n\\"\\\\\\u00e9\\x41\\101\\U0001F600" }}')).toBe('a\tb\n"\\éAA😀');
    expect(run('{{ "\\xc3\\xa9" }}')).toBe('é');
    expect(run('{{ `raw\\n` }}')).toBe('raw\\n');
    expect(run('{{ 42 }} {{ -7 }} {{ 0x1F }} {{ 017 }} {{ 0b101 }} {{ 1_000 }}')).toBe('42 -7 31 15 5 1000');
    expect(run('{{ 1.5 }} {{ 1e3 }} {{ .5 }} {{ 1e6 }} {{ 1e-5 }} {{ 2.50 }}')).toBe('1.5 1000 0.5 1e+06 1e-05 2.5');
    expect(run("{{ 'a' }} {{ '\\n' }} {{ 'é' }}")).toBe('97 10 233');
    expect(run('{{ true }} {{ false }}')).toBe('true false');
  });

  it('reports parse errors with Go messages and line numbers', () => {
    expect(parseError('a\nb\n{{ .X } }}')).toBe('template: :3: unexpected "}" in operand');
    expect(parseError('{{ if .X }}\n\nno end')).toBe('template: :3: unexpected EOF');
    expect(parseError('{{ foo 1 }}')).toBe('template: :1: function "foo" not defined');
    expect(parseError('{{ end }}')).toBe('template: :1: unexpected {{end}}');
    expect(parseError('{{ else }}')).toBe('template: :1: unexpected {{else}}');
    expect(parseError('{{ $x }}')).toBe('template: :1: undefined variable "$x"');
    expect(parseError('{{ }}')).toBe('template: :1: missing value for command');
    expect(parseError('{{ .X')).toBe('template: :1: unclosed action');
    expect(parseError('{{ "abc }}')).toBe('template: :1: unterminated quoted string');
    expect(parseError('{{ "\\q" }}')).toBe('template: :1: invalid syntax');
    expect(parseError('{{ break }}')).toBe('template: :1: {{break}} outside {{range}}');
    expect(parseError('{{ (1 }}')).toBe('template: :1: unclosed left paren');
    expect(parseError('{{ 1) }}')).toBe('template: :1: unexpected ")" in command');
    expect(parseError('{{ 3x }}')).toBe('template: :1: bad number syntax: "3x"');
    expect(parseError('{{ .X | 3 }}')).toBe('template: :1: non executable command in pipeline stage 2');
    expect(parseError('{{ "a".B }}')).toBe('template: :1: unexpected . after term "\\"a\\""');
    expect(parseError('{{ if 1 }}{{ else }}{{ else }}{{ end }}')).toBe('template: :1: expected end; found {{else}}');
  });
});

describe('Go text/template: control structures and variables', () => {
  it('runs if / else if / else', () => {
    const t = new GoTemplate('{{ if eq .N 1 }}one{{ else if eq .N 2 }}two{{ else }}many{{ end }}');
    expect([1, 2, 3].map((n) => t.execute({ N: new GoInt(n) }))).toEqual(['one', 'two', 'many']);
  });

  it('uses Go truthiness', () => {
    const t = new GoTemplate('{{ if . }}T{{ else }}F{{ end }}');
    const values = [false, true, 0, 1, new GoInt(0), new GoInt(2), '', 'x', [], [0], {}, { a: 1 }, null, undefined, new GoStruct(POINT, {})];
    expect(values.map((v) => t.execute(v)).join('')).toBe('FTFTFTFTFTFTFFT');
  });

  it('runs with / else with / else, rebinding dot', () => {
    const t = new GoTemplate('{{ with .A }}a={{ . }}{{ else with .B }}b={{ . }}{{ else }}none{{ end }}');
    expect(t.execute({ A: 'x' })).toBe('a=x');
    expect(t.execute({ B: 'y' })).toBe('b=y');
    expect(t.execute({})).toBe('none');
  });

  it('ranges over slices, maps (sorted keys), ints, with else, break and continue', () => {
    expect(run('{{ range $i, $e := . }}{{ $i }}={{ $e }};{{ end }}', ['a', 'b'])).toBe('0=a;1=b;');
    expect(run('{{ range . }}{{ . }}{{ end }}', ['a', 'b'])).toBe('ab');
    expect(run('{{ range $k, $v := . }}{{ $k }}:{{ $v }} {{ end }}', { b: 2, a: 1, B: 3 })).toBe('B:3 a:1 b:2 ');
    expect(run('{{ range $v := . }}{{ $v }}{{ end }}', { b: 2, a: 1 })).toBe('12');
    expect(run('{{ range 4 }}{{ . }}{{ end }}')).toBe('0123');
    expect(run('{{ range $i := 3 }}[{{ $i }}]{{ end }}')).toBe('[0][1][2]');
    expect(run('{{ range .X }}x{{ else }}empty{{ end }}', { X: [] })).toBe('empty');
    expect(run('{{ range .X }}x{{ else }}empty{{ end }}')).toBe('empty');
    expect(run('{{ range 0 }}x{{ else }}zero{{ end }}')).toBe('zero');
    expect(run('{{ range . }}{{ if eq . 3 }}{{ break }}{{ end }}{{ if eq . 1 }}{{ continue }}{{ end }}{{ . }}{{ end }}', [0, 1, 2, 3, 4].map((n) => new GoInt(n)))).toBe('02');
    expect(execError('{{ range $i, $e := 3 }}{{ end }}')).toBe('template: :1:9: executing "" at <{{range $i, $e := 3}}{{end}}>: can\'t use 3 to iterate over more than one variable');
    expect(execError('{{ range "abc" }}{{ end }}')).toMatch(/range can't iterate over abc$/);
    expect(execError('{{ range 1.5 }}{{ end }}')).toMatch(/range can't iterate over 1.5$/);
  });

  it('declares and assigns variables, scoped to their control structure; $ is the data', () => {
    expect(run('{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ $y := 3 }}{{ $y }}{{ end }}{{ $x }}')).toBe('32');
    expect(run('{{ range $i, $e := .L }}{{ $.Name }}{{ $i }}{{ end }}', { Name: 'n', L: ['a', 'b'] })).toBe('n0n1');
    expect(run('{{ with .A }}{{ $.B }}{{ .C }}{{ end }}', { A: { C: 'c' }, B: 'b' })).toBe('bc');
    expect(run('{{ $m := .M }}{{ $m.K.J }}', { M: { K: { J: 'deep' } } })).toBe('deep');
    expect(run('{{ (index .L 1).Name }}', { L: [{ Name: 'a' }, { Name: 'b' }] })).toBe('b');
    expect(parseError('{{ if true }}{{ $y := 3 }}{{ end }}{{ $y }}')).toBe('template: :1: undefined variable "$y"');
  });

  it('runs define, template and block; guards recursion', () => {
    expect(run('{{ define "t" }}[{{ . }}]{{ end }}{{ template "t" "x" }}{{ template "t" }}')).toBe('[x][<no value>]');
    expect(run('{{ block "b" .N }}<{{ . }}>{{ end }}', { N: 'n' })).toBe('<n>');
    expect(parseError('{{ define "b" }}x{{ end }}{{ block "b" . }}y{{ end }}')).toBe('template: :1: template: multiple definition of template "b"');
    expect(run('{{ define "r" }}{{ if gt . 0 }}{{ . }}{{ template "r" (len (slice "xxxxxxxx" 1 .)) }}{{ end }}{{ end }}{{ template "r" 3 }}')).toBe('321');
    expect(execError('{{ template "nope" }}')).toBe('template: :1:12: executing "" at <{{template "nope"}}>: template "nope" not defined');
    expect(execError('{{ define "loop" }}{{ template "loop" }}{{ end }}{{ template "loop" }}')).toMatch(/exceeded maximum template depth \(100\)$/);
    expect(parseError('{{ define "a" }}x{{ end }}{{ define "a" }}y{{ end }}')).toBe('template: :1: template: multiple definition of template "a"');
  });
});

describe('Go text/template: values', () => {
  it('prints values as fmt %v does', () => {
    expect(run('{{ .A }}|{{ .M }}|{{ .Missing }}|{{ .N }}|{{ .F }}|{{ .E }}', { A: ['a', 1, null, true], M: { b: [1], a: 'x' }, N: null, F: 3, E: [] })).toBe(
      '[a 1 <nil> true]|map[a:x b:[1]]|<no value>|<no value>|3|[]',
    );
    expect([1e21, 1e20, 123456, 1234567, 0.0001, 0.00001, -2.5, 1 / 3, NaN, Infinity, -Infinity, 0, -0].map(formatGoFloat)).toEqual([
      '1e+21', '1e+20', '123456', '1.234567e+06', '0.0001', '1e-05', '-2.5', '0.3333333333333333', 'NaN', '+Inf', '-Inf', '0', '-0',
    ]);
    expect(run('{{ . }}', new GoStruct(POINT, { X: new GoInt(1), Y: 2.5, Label: 'p' }))).toBe('{1 2.5 p}');
    expect(run('{{ . }} {{ .Name }}', new GoStruct(NAMED, { Name: 'n' }))).toBe('<n> n');
    expect(run('{{ . }}', [new GoStruct(NAMED, { Name: 'a' })])).toBe('[<a>]');
    expect(run('{{ . }}', withGoMethods({ a: 1 }, { string: () => 'S' }))).toBe('S');
  });

  it('evaluates fields of maps and structs with Go errors', () => {
    const p = new GoStruct(POINT, { X: new GoInt(1), Label: '' });
    expect(run('{{ .X }}-{{ .Label }}-{{ .Y }}', p)).toBe('1--<no value>');
    expect(execError('{{ .Z }}', p)).toBe('template: :1:3: executing "" at <.Z>: can\'t evaluate field Z in type main.Point');
    expect(execError('a\n {{ .A.B }}', { A: 'str' })).toBe('template: :2:4: executing "" at <.A.B>: can\'t evaluate field B in type string');
    expect(execError('{{ .A.B }}')).toBe('template: :1:3: executing "" at <.A.B>: nil pointer evaluating interface {}.B');
    expect(run('{{ $x := .Missing }}{{ $x.B }}')).toBe('<no value>');
    expect(execError('{{ .A 1 }}', { A: 'x' })).toMatch(/A is not a method but has arguments$/);
    expect(execError('{{ nil }}')).toMatch(/nil is not a command$/);
    expect(execError('{{ $x := 1 }}{{ $x 2 }}')).toMatch(/can't give argument to non-function \$x$/);
  });

  it('marshals JSON as encoding/json does', () => {
    expect(goJsonMarshal({ b: [1, 2.5, 1e21, 1e-7, 1e20, 1e-6, new GoInt(7)], a: '<a href="x">&\u2028\u2029\n\t\u0001\b\f é😀' })).toBe(
      '{"a":"\\u003ca href=\\"x\\"\\u003e\\u0026\\u2028\\u2029\\n\\t\\u0001\\b\\f é😀","b":[1,2.5,1e+21,1e-7,100000000000000000000,0.000001,7]}',
    );
    expect(goJsonMarshal(new GoStruct(POINT, { X: new GoInt(0), Y: 0, Label: '' }))).toBe('{"x":0}');
    expect(goJsonMarshal(new GoStruct(POINT, { Y: [], Label: 'l' }))).toBe('{"x":null,"label":"l"}');
    expect(goJsonMarshal(withGoMethods(['a'], { json: () => 'a' }))).toBe('"a"');
    expect(goJsonMarshal(null)).toBe('null');
    expect(run('{{ json . }}', { z: null, y: true })).toBe('{"y":true,"z":null}');
    expect(run('{{ json . }}|', NaN)).toBe('|');
  });
});

describe('Go text/template: builtins', () => {
  it('and / or short-circuit and return the deciding value', () => {
    expect(run('{{ and 1 0 "x" }}|{{ and 1 "x" }}|{{ or 0 "" "y" 3 }}|{{ or 0 "" }}|{{ and .A .A.B }}|{{ or .S "default" }}')).toBe('0|x|y||<no value>|default');
    expect(run('{{ "v" | and 1 }}|{{ "v" | or 0 }}|{{ "v" | and 0 }}')).toBe('v|v|0');
  });

  it('not, len, index, slice', () => {
    expect(run('{{ not 0 }} {{ not "a" }} {{ not .X }}')).toBe('true false true');
    expect(run('{{ len "héllo" }} {{ len .L }} {{ len .M }}', { L: [1, 2], M: { a: 1 } })).toBe('6 2 1');
    expect(execError('{{ len 3 }}')).toBe('template: :1:3: executing "" at <len 3>: error calling len: len of type int');
    expect(execError('{{ len .X }}')).toMatch(/error calling len: len of nil pointer$/);
    expect(run('{{ index .L 1 }} {{ index .M "a" "b" }} {{ index .M "zz" }} {{ index "abc" 0 }} {{ index .L2 1 0 }}', { L: ['x', 'y'], M: { a: { b: 'ab' } }, L2: [[1], ['q']] })).toBe(
      'y ab <no value> 97 q',
    );
    expect(execError('{{ index .L 2 }}', { L: ['x', 'y'] })).toMatch(/error calling index: index out of range: 2$/);
    expect(execError('{{ index .L -1 }}', { L: ['x'] })).toMatch(/error calling index: index out of range: -1$/);
    expect(execError('{{ index .L "a" }}', { L: ['x'] })).toMatch(/error calling index: cannot index slice\/array with type string$/);
    expect(execError('{{ index 3 0 }}')).toMatch(/error calling index: can't index item of type int$/);
    expect(run('{{ slice "hello" 1 3 }} {{ slice "hello" 2 }} {{ slice .L 1 }} {{ slice .L 0 1 2 }} {{ slice .L }}', { L: ['a', 'b', 'c'] })).toBe('el llo [b c] [a] [a b c]');
    expect(execError('{{ slice "abc" 2 1 }}')).toMatch(/error calling slice: invalid slice index: 2 > 1$/);
    expect(execError('{{ slice "abc" 0 1 2 }}')).toMatch(/error calling slice: cannot 3-index slice a string$/);
    expect(execError('{{ slice "abc" 4 }}')).toMatch(/error calling slice: index out of range: 4$/);
  });

  it('compares as Go does', () => {
    expect(run('{{ eq 1 2 3 1 }} {{ eq "a" "b" }} {{ eq .X .Y }} {{ ne 1 2 }} {{ eq true true }} {{ eq .N "x" }}', { X: 1.5, Y: 1.5 })).toBe('true false true true true false');
    expect(run('{{ lt 1 2 }} {{ le 2 2 }} {{ gt "b" "a" }} {{ ge 1.5 2.5 }} {{ lt "é" "z" }}')).toBe('true true true false false');
    expect(execError('{{ eq 1 "a" }}')).toBe('template: :1:3: executing "" at <eq 1 "a">: error calling eq: incompatible types for comparison');
    expect(execError('{{ eq .F 1 }}', { F: 1 })).toMatch(/error calling eq: incompatible types for comparison$/);
    expect(execError('{{ lt true false }}')).toMatch(/error calling lt: invalid type for comparison$/);
    expect(execError('{{ lt .X 1 }}')).toMatch(/error calling lt: invalid type for comparison$/);
    expect(execError('{{ eq .L .L }}', { L: [1] })).toMatch(/error calling eq: non-comparable type/);
    expect(execError('{{ ne 1 }}')).toMatch(/wrong number of args for ne: want 2 got 1$/);
  });

  it('print, println, printf', () => {
    expect(run('{{ print 1 2 "a" "b" 3 true .L }}', { L: ['x'] })).toBe('1 2ab3 true [x]');
    expect(run('{{ println 1 "a" }}')).toBe('1 a\n');
    expect(run('{{ print .X }}|{{ print nil }}')).toBe('<nil>|<nil>');
    expect(run('{{ printf "%s=%d" "a" 5 }}|{{ "x" | printf "<%s>" }}|{{ printf "%v %v" .M .F }}', { M: { k: 'v' }, F: 0.5 })).toBe('a=5|<x>|map[k:v] 0.5');
    expect(execError('{{ printf 3 }}')).toMatch(/wrong type for value; expected string; got int$/);
  });

  it('html, js, urlquery', () => {
    expect(run('{{ html "<a href=\'x\'>&\\"" }}')).toBe('&lt;a href=&#39;x&#39;&gt;&amp;&#34;');
    expect(run('{{ js "a\'b\\"c\\\\<>&=\\n é" }}')).toBe("a\\'b\\\"c\\\\\\u003C\\u003E\\u0026\\u003D\\u000A é");
    expect(run('{{ urlquery "a b&c=d/é" }}')).toBe('a+b%26c%3Dd%2F%C3%A9');
    expect(run('{{ html 1 2 }}')).toBe('1 2');
    expect(execError('{{ call .F }}', { F: 1 })).toMatch(/error calling call/);
  });

  it('pipes the previous result as the last argument', () => {
    expect(run('{{ "a" | printf "%s%s" "b" }}')).toBe('ba');
    expect(run('{{ .L | len | printf "%03d" }}', { L: [1, 2] })).toBe('002');
    expect(run('{{ (printf "%s" "x") | len }}')).toBe('1');
  });
});

describe('Go fmt printf verbs', () => {
  const i = (n: number) => new GoInt(n);
  it('formats strings, ints, floats, bools and chars', () => {
    expect(goSprintf('%s|%5s|%-5s|%.2s|%q|%x|% X|%#q|%+q', ['hi', 'hi', 'hi', 'héllo', 'a"\n\u00a0é', 'hé', 'hi', 'a`b', 'é'])).toBe(
      'hi|   hi|hi   |hé|"a\\"\\n\\u00a0é"|68c3a9|68 69|"a`b"|"\\u00e9"',
    );
    expect(goSprintf('%d|%5d|%-5d|%05d|%+d|% d|%x|%X|%#x|%o|%#o|%b|%c|%q|%U|%.3d', [i(42), i(42), i(42), i(-42), i(42), i(42), i(255), i(255), i(255), i(8), i(8), i(5), i(0x263a), i(97), i(0x263a), i(7)])).toBe(
      '42|   42|42   |-0042|+42| 42|ff|FF|0xff|10|010|101|☺|\'a\'|U+263A|007',
    );
    expect(goSprintf('%f|%.2f|%8.3f|%-8.1f|%08.3f|%+.1f|%e|%.2e|%E|%g|%.3g|%g|%g|%G', [3.14159, 2.675, 3.14159, 2.5, -3.14159, 2.0, 1234.5678, 0.000123, 1e6, 1e6, 3.14159, 100000.0, 1e-5, 1e-10])).toBe(
      '3.141590|2.67|   3.142|2.5     |-003.142|+2.0|1.234568e+03|1.23e-04|1.000000E+06|1e+06|3.14|100000|1e-05|1E-10',
    );
    expect(goSprintf('%.2f|%.0f|%.0f|%.1f', [0.125, 0.5, 1.5, 0.05])).toBe('0.12|0|2|0.1');
    expect(goSprintf('%t|%v|%5t', [true, false, true])).toBe('true|false| true');
    expect(goSprintf('%%|%v|%+v|%d', [new GoStruct(POINT, { X: i(1), Y: 2 }), new GoStruct(POINT, { X: i(1) }), [i(1), i(2)]])).toBe('%|{1 2 <nil>}|{X:1 Y:<nil> Label:<nil>}|[1 2]');
    expect(goSprintf('%*d|%-*d|%.*f', [i(4), i(7), i(3), i(7), i(1), 2.25])).toBe('   7|7  |2.2');
  });

  it('reports bad verbs, missing and extra operands as fmt does', () => {
    expect(goSprintf('%d|%s|%f|%t|%z', ['a', i(3), i(3), 'x', i(1)])).toBe('%!d(string=a)|%!s(int=3)|%!f(int=3)|%!t(string=x)|%!z(int=1)');
    expect(goSprintf('%d %d', [i(1)])).toBe('1 %!d(MISSING)');
    expect(goSprintf('%d', [i(1), 'x', 2.5])).toBe('1%!(EXTRA string=x, float64=2.5)');
    expect(goSprintf('%d|%s', [null, null])).toBe('%!d(<nil>)|%!s(<nil>)');
    expect(goSprintf('%d|%c', [3.0, 1])).toBe('%!d(float64=3)|%!c(float64=1)');
    expect(goSprintf('abc%', [])).toBe('abc%!(NOVERB)');
  });
});

describe('Go text/template: Ollama helpers and limits', () => {
  it('lists the identifiers of fields and variables (Ollama Vars)', () => {
    const t = new GoTemplate('{{ if .System }}{{ .System }}{{ end }}{{ range $i, $m := .Messages }}{{ $m.Content }}{{ end }}{{ define "x" }}{{ .Tool.Name }}{{ end }}');
    expect(t.vars()).toEqual(['$m', 'content', 'messages', 'name', 'system', 'tool']);
  });

  it('appends a field action and deletes nodes as Ollama does', () => {
    const t = new GoTemplate('A{{ .Prompt }}B');
    expect(t.withAppendedField('Response').execute({ Prompt: 'p', Response: 'r' })).toBe('ApBr');
    let cut = false;
    const cutTree = new GoTemplate('<{{ if .P }}{{ .P }}{{ end }}|{{ .Response }}{{ .After }}>tail').withoutNodes((n) => {
      if (n.kind === 'field' && n.idents.includes('Response')) return !(cut = true);
      return cut;
    });
    expect(cutTree.execute({ P: 'p', Response: 'r', After: 'x' })).toBe('<p|r');
  });

  it('refuses ranges and outputs over the limits', () => {
    expect(execError('{{ range 2000000 }}{{ end }}')).toMatch(/exceeds the limit of 1048576 iterations$/);
    expect(execError('{{ range 2000 }}{{ $.S }}{{ end }}', { S: 'x'.repeat(1 << 16) })).toMatch(/output exceeds 16777216 characters$/);
    expect(execError('{{ range 1048576 }}{{ range 1048576 }}{{ end }}{{ end }}')).toMatch(/execution exceeds 4194304 steps$/);
    expect(execError('{{ define "t" }}{{ template "t" }}{{ template "t" }}{{ end }}{{ template "t" }}')).toMatch(/exceeded maximum template depth \(100\)$/);
    expect(run('{{ range 1000 }}{{ end }}ok')).toBe('ok');
    // Widths and precisions past a million are Go's errors, not a gigabyte of padding.
    expect(run('{{ printf "%*d" 1000000000 1 }}')).toBe('%!(BADWIDTH)1');
    expect(run('{{ printf "%.*f" 2000000 1.5 }}')).toBe('%!(BADPREC)1.500000');
    expect(run('{{ printf "%.1000000000f|" 1.5 }}')).toBe('%!(NOVERB)%!(EXTRA float64=1.5)');
  });
});
