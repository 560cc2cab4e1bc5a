import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { expandModelfilePath, ModelfileError, parseModelfile, planCreate } from './create';

describe("kail create: Modelfiles read as Ollama's parser reads them", () => {
  it('reads instructions in any case, values to the end of the line, comments and blank lines', () => {
    const cmds = parseModelfile('# a comment\n\nfrom llama3.2\nPARAMETER temperature 0.7\n  Parameter stop <|im_end|>\nSYSTEM You are Mario, from super mario bros.\r\nmessage user Is Toronto in Canada?\n');
    expect(cmds).toEqual([
      { name: 'from', args: 'llama3.2', line: 3 },
      { name: 'parameter', key: 'temperature', args: '0.7', line: 4 },
      { name: 'parameter', key: 'stop', args: '<|im_end|>', line: 5 },
      { name: 'system', args: 'You are Mario, from super mario bros.', line: 6 },
      { name: 'message', key: 'user', args: 'Is Toronto in Canada?', line: 7 },
    ]);
  });

  it('reads "…" and """…""" values over several lines, closed where a line ends with the quotes', () => {
    const text = 'FROM m\nSYSTEM """\nYou are "terse".\nAnswer in one line.\n"""\nLICENSE "MIT\nlicense"\nMESSAGE assistant """She said "yes""""\nPARAMETER stop "  "\nTEMPLATE ""\nPARAMETER seed 3\n';
    const cmds = parseModelfile(text);
    expect(cmds.map((c) => [c.name, c.args, c.line])).toEqual([
      ['from', 'm', 1],
      ['system', '\nYou are "terse".\nAnswer in one line.\n', 2],
      ['license', 'MIT\nlicense', 6],
      ['message', 'She said "yes"', 8],
      ['parameter', '  ', 9],
      ['template', '', 10],
      ['parameter', '3', 11],
    ]);
  });

  it('refuses what Ollama refuses, naming the line', () => {
    const bad: [string, RegExp][] = [
      ['FROM m\nSTOP now\n', /line 2: unknown instruction "STOP"/],
      ['FROM m\nSYSTEM\n', /line 2: SYSTEM takes a value after a space/],
      ['FROM m\nMESSAGE tool hi\n', /line 2: MESSAGE takes a role \(system, user or assistant\)/],
      ['FROM m\nPARAMETER temperature\n', /line 2: PARAMETER takes a name and a value/],
      ['FROM m\n\nSYSTEM """never closed\nPARAMETER seed 1\n', /line 3: the quote that opens SYSTEM's value is never closed/],
      ['PARAMETER seed 1\n', /no FROM line/],
      ['FROM m\n= x\n', /line 2: unknown instruction "= x"/],
    ];
    for (const [text, re] of bad) expect(() => parseModelfile(text)).toThrow(re);
    expect(() => parseModelfile('PARAMETER seed 1')).toThrow(ModelfileError);
  });
});

describe('kail create: what a Modelfile asks of /api/create', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-create-'));
  const gguf = path.join(dir, 'model.gguf');
  fs.writeFileSync(gguf, Buffer.concat([Buffer.from('GGUF'), Buffer.alloc(60)]));
  fs.mkdirSync(path.join(dir, 'sub'));
  fs.writeFileSync(path.join(dir, 'sub', 'lora.gguf'), Buffer.concat([Buffer.from('GGUF'), Buffer.alloc(60)]));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const plan = (text: string) => planCreate(parseModelfile(text), dir);

  it('types PARAMETER values as Ollama does, gathers stop lines, keeps the last SYSTEM, every LICENSE and MESSAGE', () => {
    const p = plan(
      'FROM ./model.gguf\nADAPTER sub/lora.gguf\nPARAMETER temperature 0\nPARAMETER top_k 20\nPARAMETER stop A\nPARAMETER stop "B C"\nPARAMETER use_mmap false\nPARAMETER penalize_newline true\nSYSTEM one\nSYSTEM two\nLICENSE MIT\nLICENSE Apache\nMESSAGE user hi\nMESSAGE assistant hello\nREQUIRES 0.14.0\nTEMPLATE ""\n',
    );
    expect(p).toEqual({
      file: gguf,
      adapters: [path.join(dir, 'sub', 'lora.gguf')],
      system: 'two',
      parameters: { temperature: 0, top_k: 20, stop: ['A', 'B C'], use_mmap: false },
      messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }],
      license: ['MIT', 'Apache'],
      warnings: ['warning: parameter penalize_newline is deprecated (line 8); it is ignored'],
    });
    // FROM a name (no such file): a model of the server; FROM a directory with one GGUF: that file.
    expect(plan('FROM qwen3:8b\n')).toMatchObject({ from: 'qwen3:8b' });
    expect(plan('FROM qwen3:8b\n').file).toBeUndefined();
    expect(plan('FROM sub\n').file).toBe(path.join(dir, 'sub', 'lora.gguf'));
    expect(plan(`FROM ${gguf}\n`).file).toBe(gguf);
    expect(expandModelfilePath('~/m.gguf', dir)).toBe(path.join(os.homedir(), 'm.gguf'));
    // TEMPLATE: Ollama's Go template, sent as it is.
    const t = '{{ if .System }}<|system|>{{ .System }}{{ end }}<|user|>{{ .Prompt }}<|assistant|>';
    expect(plan(`FROM m\nTEMPLATE """${t}"""\n`).template).toBe(t);
  });

  it('refuses, before anything is uploaded, what it cannot make, saying why', () => {
    fs.writeFileSync(path.join(dir, 'model.safetensors'), '{}');
    fs.writeFileSync(path.join(dir, 'm-00001-of-00002.gguf'), 'GGUF');
    const bad: [string, RegExp][] = [
      ['FROM ./missing.gguf\n', /line 1: FROM .\/missing.gguf: there is no such file/],
      ['FROM ./model.safetensors\n', /line 1: FROM .*model.safetensors is not a GGUF file \(safetensors are not imported/],
      ['FROM m-00001-of-00002.gguf\n', /is one split of a model: kail create takes a whole GGUF file \(join the splits with kail gguf-split --merge/],
      ['FROM .\n', /FROM .* is a directory with 2 GGUF files \(m-00001-of-00002.gguf, model.gguf\): name the file/],
      ['FROM m\nFROM n\n', /line 2: a second FROM \(the first is on line 1\)/],
      ['FROM m\nADAPTER nope.gguf\n', /line 2: ADAPTER nope.gguf: there is no such file/],
      ['FROM m\nTEMPLATE "{{ .Prompt }"\n', /line 2: TEMPLATE: template: :1: unexpected "}" in operand/],
      ['FROM m\nTEMPLATE {{ upper .Prompt }}\n', /line 2: TEMPLATE: template: :1: function "upper" not defined/],
      ['FROM m\nDRAFT ./d.gguf\n', /DRAFT is not supported by kail create: .*kail serve -m MODEL --draft/],
      ['FROM m\nRENDERER qwen3\n', /RENDERER names one of Ollama's built-in Go renderers/],
      ['FROM m\nPARAMETER temprature 1\n', /line 2: unknown parameter 'temprature' \(Ollama's parameters: .*temperature/],
      ['FROM m\nPARAMETER top_k 2.5\n', /line 2: PARAMETER top_k takes an integer, got "2.5"/],
      ['FROM m\nPARAMETER temperature hot\n', /PARAMETER temperature takes a number, got "hot"/],
      ['FROM m\nPARAMETER numa maybe\n', /PARAMETER numa takes true or false/],
      ['FROM m\nREQUIRES latest\n', /REQUIRES takes a version/],
    ];
    for (const [text, re] of bad) expect(() => plan(text)).toThrow(re);
  });
});
