/**
 * llama.cpp's string_process_escapes (common.cpp), applied by its tools to prompts, reverse prompts
 * and DRY sequence breakers unless `--no-escape`: \n \r \t \' \" \\ and \xHH (a byte; bytes that
 * are no UTF-8 come out as U+FFFD); any other backslash stays as written.
 */
export function processEscapes(text: string): string {
  const input = Buffer.from(text, 'utf8');
  const out = Buffer.alloc(input.length);
  let n = 0;
  // strtol(x, &end, 16) over two characters, as llama.cpp reads \xHH: a value when it takes both
  // (two hex digits, or one after a space or a sign), else null.
  const strtol2 = (a: number, b: number): number | null => {
    const d = (c: number) => (/^[0-9a-fA-F]$/.test(String.fromCharCode(c)) ? parseInt(String.fromCharCode(c), 16) : -1);
    if (d(a) >= 0 && d(b) >= 0) return d(a) * 16 + d(b);
    if (d(b) < 0) return null;
    if (' \t\n\v\f\r+'.includes(String.fromCharCode(a))) return d(b);
    return a === 0x2d ? -d(b) : null;
  };
  for (let i = 0; i < input.length; i++) {
    if (input[i] !== 0x5c || i + 1 >= input.length) {
      out[n++] = input[i];
      continue;
    }
    const c = String.fromCharCode(input[++i]);
    const simple: Record<string, number> = { n: 0x0a, r: 0x0d, t: 0x09, "'": 0x27, '"': 0x22, '\\': 0x5c };
    if (c in simple) out[n++] = simple[c];
    else if (c === 'x' && i + 2 < input.length && strtol2(input[i + 1], input[i + 2]) !== null) {
      out[n++] = strtol2(input[i + 1], input[i + 2])! & 0xff;
      i += 2;
    } else {
      out[n++] = 0x5c;
      out[n++] = input[i];
    }
  }
  return out.subarray(0, n).toString('utf8');
}
