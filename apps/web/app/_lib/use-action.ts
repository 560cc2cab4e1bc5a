'use client';
import { useState, type FormEvent } from 'react';

import { errorMessage } from './api';

export interface Action {
  /** The last run's failure, as the API said it; null before a run and after one that succeeded. */
  error: string | null;
  /** Runs `fn`, clearing the last error first and keeping the new one. */
  run: (fn: () => Promise<unknown>) => Promise<void>;
  /** A form's onSubmit that runs `fn` instead of submitting the page. */
  submit: (fn: () => Promise<unknown>) => (e: FormEvent) => void;
}

/** What the console's buttons and forms share: run an API call, show what went wrong. */
export function useAction(): Action {
  const [error, setError] = useState<string | null>(null);
  const run = async (fn: () => Promise<unknown>) => {
    setError(null);
    try {
      await fn();
    } catch (e) {
      setError(errorMessage(e));
    }
  };
  return {
    error,
    run,
    submit: (fn) => (e) => {
      e.preventDefault();
      void run(fn);
    },
  };
}
