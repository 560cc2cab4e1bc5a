import { processEscapes } from './escapes';

describe("processEscapes (llama.cpp's string_process_escapes)", () => {
  it.each([
    ['a\\nb', 'a\nb'],
    ['\\r\\t\\\'\\"\\\\', '\r\t\'"\\'],
    ['\\x41\\x62c', 'Abc'],
    ['\\xe2\\x82\\xac', '€'],
    ['C:\\new\\folder', 'C:\new\\folder'],
    ['\\q stays', '\\q stays'],
    ['\\xZZ', '\\xZZ'],
    ['end\\', 'end\\'],
    ['\\x4', '\\x4'],
    ['\\x41', 'A'],
    // (strtol's reading of two characters: a space or a sign before one digit.)
    ['\\x 9|', '\t|'],
    ['\\x-1|', '\ufffd|'],
    ['\\x0x1', '\\x0x1'],
    ['\\x41.', 'A.'],
    ['ü \\n ü', 'ü \n ü'],
  ])('%j -> %j', (input, want) => {
    expect(processEscapes(input)).toBe(want);
  });
});
