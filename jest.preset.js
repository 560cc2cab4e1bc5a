// Shared jest settings: TypeScript through SWC (type checking is the separate `typecheck` target),
// workspace packages resolved to their sources through the "@kailstream/source" export condition.
const path = require('node:path');

/** @param {string} projectDir @param {object} [extra] */
module.exports = function preset(projectDir, extra = {}) {
  return {
    rootDir: projectDir,
    testEnvironment: 'node',
    testEnvironmentOptions: {
      customExportConditions: ['@kailstream/source', 'node', 'require', 'default'],
    },
    transform: {
      '^.+\\.(t|j)sx?$': [
        require.resolve('@swc/jest'),
        {
          jsc: {
            parser: { syntax: 'typescript', tsx: true, decorators: false },
            target: 'es2022',
            transform: { react: { runtime: 'automatic' } },
          },
          module: { type: 'commonjs' },
          sourceMaps: 'inline',
        },
      ],
    },
    moduleFileExtensions: ['ts', 'tsx', 'js', 'mjs', 'cjs', 'json', 'node'],
    testMatch: ['<rootDir>/**/*.spec.ts', '<rootDir>/**/*.spec.tsx'],
    testPathIgnorePatterns: ['/node_modules/', '/dist/', '/build/', '/.next/'],
    cacheDirectory: path.join(__dirname, 'node_modules/.cache/jest'),
    ...extra,
  };
};
