// Refusals for the files a command reads and writes (the GGUF tools, the CLI's --output flags),
// each naming the file and what is wrong, before any work is done (a raw ENOENT/EISDIR at the end
// says neither which file nor which flag).
import fs from 'node:fs';
import path from 'node:path';

import { fsErrorText } from './errors';

/** An input file: there, and a file; `what` names it ('quantize: the input', 'LoRA adapter'). */
export function checkInputFile(file: string, what: string): void {
  let st: fs.Stats;
  try {
    st = fs.statSync(file);
  } catch (e) {
    throw new Error(`${what} ${file}: ${fsErrorText(e)}`);
  }
  if (st.isDirectory()) throw new Error(`${what} ${file} is a directory, not a file`);
}

/** An output file: not a directory, in a directory that exists; `what` names it ('--output:', 'quantize: the output'). */
export function checkOutputFile(file: string, what: string): void {
  if (fs.existsSync(file) && fs.statSync(file).isDirectory()) throw new Error(`${what} ${file} is a directory; name a file`);
  const dir = path.dirname(path.resolve(file));
  let st: fs.Stats;
  try {
    st = fs.statSync(dir);
  } catch (e) {
    throw new Error(`${what} ${file}: cannot write in ${dir}: ${fsErrorText(e)}`);
  }
  if (!st.isDirectory()) throw new Error(`${what} ${file}: cannot write in ${dir}: not a directory`);
}
