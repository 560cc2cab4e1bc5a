/** KailStream version (kept in step with the root package.json). */
export const VERSION = '0.1.0';
