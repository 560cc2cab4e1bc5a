/**
 * Progress for long CLI work: a redrawn bar on a terminal, plain lines otherwise (logs, CI, pipes),
 * where it prints a line at most every 10% or every 5 s so a log stays short.
 */
export interface Progress {
  /** Sets the amount done (of `total`) and an optional detail shown after the bar. */
  update(done: number, detail?: string): void;
  /** Finishes: the bar at 100% (or the message) and a newline. */
  done(message?: string): void;
}

export interface ProgressOptions {
  label: string;
  /** Amount of work; 0 = unknown (a start line and an end line, with the time taken). */
  total: number;
  /** Where to draw. Default process.stderr (stdout stays for the command's output). */
  stream?: NodeJS.WriteStream;
  /** Force the terminal bar on or off; default: stream.isTTY. */
  tty?: boolean;
  /** Formats amounts (e.g. bytes); default String. */
  format?: (n: number) => string;
}

const WIDTH = 28;

export function createProgress(opts: ProgressOptions): Progress {
  const stream = opts.stream ?? process.stderr;
  const tty = opts.tty ?? !!stream.isTTY;
  const fmt = opts.format ?? String;
  const t0 = Date.now();
  let lastDraw = 0;
  let lastPct = -1;
  let finished = false;
  const secs = () => ((Date.now() - t0) / 1000).toFixed(1);

  const line = (done: number, detail?: string) => {
    const total = opts.total;
    if (total <= 0) return `${opts.label}: ${fmt(done)}${detail ? ` ${detail}` : ''}`;
    const f = Math.min(1, Math.max(0, done / total));
    const bar = tty ? `[${'#'.repeat(Math.round(f * WIDTH)).padEnd(WIDTH, '-')}] ` : '';
    return `${opts.label} ${bar}${(f * 100).toFixed(0).padStart(3)}% ${fmt(done)}/${fmt(total)}${detail ? ` ${detail}` : ''}`;
  };

  if (!tty || opts.total <= 0) stream.write(`${opts.label}...\n`);

  return {
    update(done, detail) {
      if (finished) return;
      const now = Date.now();
      if (tty) {
        if (opts.total <= 0 || now - lastDraw < 100) return;
        lastDraw = now;
        // \x1b[K clears what a longer previous line left.
        stream.write(`\r${line(done, detail)}\x1b[K`);
        return;
      }
      const pct = opts.total > 0 ? Math.floor((done / opts.total) * 10) : 0;
      if (pct > lastPct || now - lastDraw > 5000) {
        if (opts.total > 0 && pct >= 10) return; // the final line comes from done()
        lastPct = pct;
        lastDraw = now;
        stream.write(line(done, detail) + '\n');
      }
    },
    done(message) {
      if (finished) return;
      finished = true;
      const end = message ?? (opts.total > 0 ? line(opts.total) : `${opts.label}: done`);
      stream.write(`${tty && opts.total > 0 ? '\r' : ''}${end} (${secs()} s)${tty ? '\x1b[K' : ''}\n`);
    },
  };
}
