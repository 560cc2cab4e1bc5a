// --override-kv KEY=TYPE:VALUE as llama.cpp parses it (common/common.cpp string_parse_kv_override,
// the comma lists of arg.cpp's parse_csv_row), stricter where llama.cpp reads garbage as 0, and
// how a load's metadata takes the values.
import { applyKvOverrides, formatKvOverride, parseKvOverride, parseKvOverrides, splitOverrideList, type KvOverride } from './kv-override';

describe('--override-kv', () => {
  it('parses the four types; the value keeps any colons and equals signs', () => {
    expect(parseKvOverride('qwen3moe.expert_used_count=int:4')).toEqual({ key: 'qwen3moe.expert_used_count', type: 'int', value: 4 });
    expect(parseKvOverride('a.b=int:-12')).toEqual({ key: 'a.b', type: 'int', value: -12 });
    expect(parseKvOverride('llama.rope.freq_base=float:1e6')).toEqual({ key: 'llama.rope.freq_base', type: 'float', value: 1e6 });
    expect(parseKvOverride('x=float:-0.25')).toEqual({ key: 'x', type: 'float', value: -0.25 });
    expect(parseKvOverride('tokenizer.ggml.add_bos_token=bool:false')).toEqual({ key: 'tokenizer.ggml.add_bos_token', type: 'bool', value: false });
    expect(parseKvOverride('general.name=str:a=b:c')).toEqual({ key: 'general.name', type: 'str', value: 'a=b:c' });
    expect(parseKvOverride('general.name=str:')).toEqual({ key: 'general.name', type: 'str', value: '' });
  });

  it.each([
    ['no-equals', /no '='/],
    ['=int:1', /the key is empty/],
    ['k=int', /no TYPE: before the value/],
    ['k=4', /no TYPE: before the value/],
    ['k=double:1', /unknown type 'double'/],
    ['k=int:1.5', /'1.5' is not an integer/],
    ['k=int:abc', /'abc' is not an integer/],
    ['k=int:', /'' is not an integer/],
    ['k=int:99999999999999999999', /not an integer \(of at most 2\^53\)/],
    ['k=float:nan', /'nan' is not a finite number/],
    ['k=float:', /'' is not a finite number/],
    ['k=float:1e999', /not a finite number/],
    ['k=bool:yes', /a bool is true or false, not 'yes'/],
    ['k=bool:TRUE', /a bool is true or false/],
  ])('refuses %s, naming it and the form it wants', (item, why) => {
    expect(() => parseKvOverride(item)).toThrow(why);
    expect(() => parseKvOverride(item)).toThrow(`--override-kv '${item}'`);
    expect(() => parseKvOverride(item)).toThrow(/expected KEY=TYPE:VALUE with TYPE int, float, bool or str/);
  });

  it('splits a value at commas, as llama.cpp does, with quotes keeping commas', () => {
    expect(splitOverrideList('a=int:1,b=bool:false')).toEqual(['a=int:1', 'b=bool:false']);
    expect(splitOverrideList('"general.name=str:a,b",x=int:2')).toEqual(['general.name=str:a,b', 'x=int:2']);
    expect(splitOverrideList('"n=str:say ""hi"""')).toEqual(['n=str:say "hi"']);
    // A quote inside an unquoted field is a character.
    expect(splitOverrideList('n=str:a"b')).toEqual(['n=str:a"b']);
    expect(parseKvOverrides(['a=int:1,b=bool:true', 'c=str:x'])).toEqual([
      { key: 'a', type: 'int', value: 1 },
      { key: 'b', type: 'bool', value: true },
      { key: 'c', type: 'str', value: 'x' },
    ]);
    expect(() => parseKvOverrides(['a=int:1,'])).toThrow(/--override-kv '': no '='/);
  });

  it('formats an override so that parsing it gives it back', () => {
    const all: KvOverride[] = [
      { key: 'a', type: 'int', value: -3 },
      { key: 'b', type: 'float', value: 0.1 },
      { key: 'c', type: 'bool', value: false },
      { key: 'general.name', type: 'str', value: 'x, "y" = z:w' },
    ];
    expect(parseKvOverrides([all.map(formatKvOverride).join(',')])).toEqual(all);
  });

  it('puts the values in place of the file\'s, adds absent keys, and leaves the file\'s record alone', () => {
    const kv = { 'general.architecture': 'llama', 'llama.expert_used_count': 2, 'llama.rope.freq_base': 10000, 'tokenizer.ggml.add_bos_token': true, big: 5n };
    const out = applyKvOverrides(kv, parseKvOverrides(['llama.expert_used_count=int:1,llama.rope.freq_base=float:5e5,tokenizer.ggml.add_bos_token=bool:false,big=int:7,new.key=str:v,llama.expert_used_count=int:3']));
    expect(out).toEqual({ 'general.architecture': 'llama', 'llama.expert_used_count': 3, 'llama.rope.freq_base': 5e5, 'tokenizer.ggml.add_bos_token': false, big: 7, 'new.key': 'v' });
    expect(kv['llama.expert_used_count']).toBe(2);
    expect(applyKvOverrides(kv, [])).toBe(kv);
  });

  it('refuses a value of another kind than the file holds, and arrays, naming the key', () => {
    const kv = { 'llama.block_count': 2, 'tokenizer.ggml.add_bos_token': true, 'general.name': 'm', 'tokenizer.ggml.tokens': ['a', 'b'], 'llama.head_count_kv': new Int32Array([1, 2]) };
    const bad = (s: string) => () => applyKvOverrides(kv, parseKvOverrides([s]));
    expect(bad('llama.block_count=str:2')).toThrow(/--override-kv llama.block_count=str:2: the model's 'llama.block_count' is a number, not a string; use int: or float:/);
    expect(bad('llama.block_count=bool:true')).toThrow(/is a number, not a boolean/);
    expect(bad('tokenizer.ggml.add_bos_token=int:0')).toThrow(/is a boolean, not a number; use bool:/);
    expect(bad('general.name=int:1')).toThrow(/is a string, not a number; use str:/);
    expect(bad('tokenizer.ggml.tokens=str:x')).toThrow(/'tokenizer.ggml.tokens' is an array; overrides set single values/);
    expect(bad('llama.head_count_kv=int:1')).toThrow(/is an array/);
    let err: unknown;
    try {
      bad('general.name=int:1')();
    } catch (e) {
      err = e;
    }
    expect((err as { code?: string }).code).toBe('KAIL_E_INVALID_ARG');
  });
});
