import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const { violations, scanImports } = require('../scripts/check-boundaries.js') as {
  violations: (g: { nodes: Record<string, { tags: string[] }>; dependencies: Record<string, { target: string; type: string; typeOnly?: boolean }[]> }) => string[];
  scanImports: (root: string, roots: Record<string, string>) => { source: string; target: string; file: string; typeOnly: boolean }[];
};

const nodes = {
  'core-native': { tags: ['scope:native'] },
  engine: { tags: ['scope:engine'] },
  scheduler: { tags: ['scope:scheduler'] },
  api: { tags: ['type:app'] },
  cli: { tags: ['type:app'] },
};

describe('dependency boundaries', () => {
  it('allows the intended direction', () => {
    expect(
      violations({ nodes, dependencies: { engine: [{ target: 'core-native', type: 'static' }], cli: [{ target: 'engine', type: 'static' }] } }),
    ).toEqual([]);
  });

  it('rejects an app importing the native core and anything importing an app', () => {
    const v = violations({
      nodes,
      dependencies: { api: [{ target: 'core-native', type: 'static' }], scheduler: [{ target: 'cli', type: 'static' }] },
    });
    expect(v).toHaveLength(2);
    expect(v[0]).toContain('only @kailstream/engine may import @kailstream/core-native');
    expect(v[1]).toContain('nothing may import an app');
  });

  it('finds undeclared imports by package name and by relative path into another project', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-bounds-'));
    const mk = (rel: string, text: string) => {
      fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
      fs.writeFileSync(path.join(root, rel), text);
    };
    mk('packages/core-native/package.json', '{"name":"@kailstream/core-native"}');
    mk('apps/api/package.json', '{"name":"@kailstream/api"}');
    // Assembled at run time so this spec file itself holds no such import for the real check.
    const q = "'";
    mk('apps/api/src/a.ts', `import { loadBinding } from ${q}@kailstream/${'core-native'}${q};\n`);
    mk('apps/api/src/b.ts', `const x = require(${q}../../../packages/${'core-native'}/lib/index${q});\n`);
    const edges = scanImports(root, { 'core-native': path.join(root, 'packages/core-native'), api: path.join(root, 'apps/api') });
    expect(edges.map((e) => `${e.source}->${e.target}:${e.file}`).sort()).toEqual([
      'api->core-native:apps/api/src/a.ts',
      'api->core-native:apps/api/src/b.ts',
    ]);
    fs.rmSync(root, { recursive: true, force: true });
  });

  it('lets an app import only types from another app; a value import or type imports of the native core still fail', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-bounds-'));
    const mk = (rel: string, text: string) => {
      fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
      fs.writeFileSync(path.join(root, rel), text);
    };
    mk('apps/api/package.json', '{"name":"@kailstream/api"}');
    mk('apps/web/package.json', '{"name":"@kailstream/web"}');
    mk('packages/core-native/package.json', '{"name":"@kailstream/core-native"}');
    const q = "'";
    mk('apps/web/a.ts', `import type { AppRouter } from ${q}@kailstream/${'api'}${q};\n`);
    mk('apps/web/b.ts', `import { startApi } from ${q}@kailstream/${'api'}${q};\n`);
    mk('apps/web/c.ts', `import type from ${q}@kailstream/${'api'}${q};\n`);
    mk('apps/web/d.ts', `export type { X } from ${q}@kailstream/${'core-native'}${q};\n`);
    const roots = { api: path.join(root, 'apps/api'), web: path.join(root, 'apps/web'), 'core-native': path.join(root, 'packages/core-native') };
    const edges = scanImports(root, roots);
    expect(edges.map((e) => `${e.file}:${e.typeOnly}`).sort()).toEqual(['apps/web/a.ts:true', 'apps/web/b.ts:false', 'apps/web/c.ts:false', 'apps/web/d.ts:true']);
    const v = violations({
      nodes: { ...nodes, web: { tags: ['type:app'] } },
      dependencies: { web: edges.map((e) => ({ target: e.target, type: `import in ${e.file}`, typeOnly: e.typeOnly })) },
    });
    expect(v.sort()).toEqual([
      expect.stringMatching(/^web -> api \(import in apps\/web\/b\.ts\): apps are leaves/),
      expect.stringMatching(/^web -> api \(import in apps\/web\/c\.ts\): apps are leaves/),
      expect.stringMatching(/^web -> core-native \(import in apps\/web\/d\.ts\): only the engine/),
    ]);
    fs.rmSync(root, { recursive: true, force: true });
  });
});
