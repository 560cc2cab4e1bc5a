import { parseArgs, type ParseArgsConfig } from 'node:util';

type Options = NonNullable<ParseArgsConfig['options']>;

/** The options as a usage text: each flag, with its default where it has one. */
export function usageOf(name: string, options: Options): string {
  const flags = Object.entries(options).map(([k, o]) => `  --${k}${o.type === 'string' ? ' VALUE' : ''}${o.default !== undefined && o.type === 'string' ? ` (default ${String(o.default)})` : ''}`);
  return `usage: ${name} [options]\n${flags.join('\n')}\n  --help`;
}

/**
 * A benchmark's flags: `--help` prints the usage and exits 0; an unknown flag or a missing value
 * prints what was wrong and the usage, and exits 2, instead of a stack trace.
 */
export function benchArgs<O extends Options>(name: string, options: O): ReturnType<typeof parseArgs<{ options: O }>>['values'] {
  if (process.argv.slice(2).some((a) => a === '--help' || a === '-h')) {
    console.log(usageOf(name, options));
    process.exit(0);
  }
  try {
    return parseArgs({ options }).values;
  } catch (e) {
    process.stderr.write(`${name}: ${(e as Error).message}\n${usageOf(name, options)}\n`);
    process.exit(2);
  }
}
