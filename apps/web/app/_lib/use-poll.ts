'use client';
import { useCallback, useEffect, useRef, useState } from 'react';

import { errorMessage } from './api';

export interface Poll<T> {
  data: T | undefined;
  error: string | null;
  loading: boolean;
  refresh: () => void;
}

/**
 * Calls `fn` now and every `intervalMs` (0 = once) while the component is mounted; a new call
 * starts only after the previous one finished (at most one per interval), so a slow API is never
 * flooded. `deps` restart it.
 */
export function usePoll<T>(fn: () => Promise<T>, intervalMs: number, deps: unknown[] = []): Poll<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const fnRef = useRef(fn);
  fnRef.current = fn;
  const [tick, setTick] = useState(0);
  const refresh = useCallback(() => setTick((t) => t + 1), []);

  useEffect(() => {
    let alive = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      const started = Date.now();
      try {
        const v = await fnRef.current();
        if (!alive) return;
        setData(v);
        setError(null);
      } catch (e) {
        if (alive) setError(errorMessage(e));
      } finally {
        if (alive) setLoading(false);
      }
      if (alive && intervalMs > 0) timer = setTimeout(run, Math.max(0, intervalMs - (Date.now() - started)));
    };
    void run();
    return () => {
      alive = false;
      clearTimeout(timer);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [intervalMs, tick, ...deps]);

  return { data, error, loading, refresh };
}
