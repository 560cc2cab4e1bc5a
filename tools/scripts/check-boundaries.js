#!/usr/bin/env node
// Enforces the dependency direction on the workspace's project graph: Nx's graph (projects, tags,
// package.json dependencies) plus the edges found by scanning every source file's imports and
// requires (package names of workspace projects, and relative paths that reach into another
// project), so an undeclared import is caught too:
//   - nothing depends on an app (tag type:app) at run time: a type-only import (`import type … from`,
//     `export type … from`) of an app is allowed, since the compiler erases it (the web console
//     imports the API's `type AppRouter` this way and nothing else);
//   - only the engine (tag scope:engine) depends on the native core (tag scope:native).
// Fails with one line per violation. Used by `nx run tools:check-boundaries` in the test command.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const RULES = [
  {
    name: 'apps are leaves',
    forbids: (src, dst, edge) => dst.tags.includes('type:app') && !edge.typeOnly,
    why: 'nothing may import an app; move shared code into a package',
  },
  {
    name: 'only the engine touches the native core',
    forbids: (src, dst) => dst.tags.includes('scope:native') && !src.tags.includes('scope:engine'),
    why: 'only @kailstream/engine may import @kailstream/core-native; go through the engine',
  },
];

/** @param {{nodes: Record<string, {tags: string[]}>, dependencies: Record<string, {target: string, type: string, typeOnly?: boolean}[]>}} graph */
function violations(graph) {
  const out = [];
  for (const [src, deps] of Object.entries(graph.dependencies)) {
    const s = graph.nodes[src];
    if (!s) continue;
    for (const d of deps) {
      const t = graph.nodes[d.target];
      if (!t || d.target === src) continue; // npm packages are not workspace projects
      for (const rule of RULES) {
        if (rule.forbids({ name: src, tags: s.tags }, { name: d.target, tags: t.tags }, d))
          out.push(`${src} -> ${d.target} (${d.type}): ${rule.name}: ${rule.why}`);
      }
    }
  }
  return out;
}

function readGraph(root) {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kail-graph-')), 'graph.json');
  execFileSync(path.join(root, 'node_modules/.bin/nx'), ['graph', `--file=${file}`], {
    cwd: root,
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, NX_DAEMON: 'false' },
  });
  const raw = JSON.parse(fs.readFileSync(file, 'utf8')).graph;
  fs.rmSync(path.dirname(file), { recursive: true, force: true });
  const nodes = {};
  const roots = {};
  for (const [name, n] of Object.entries(raw.nodes)) {
    nodes[name] = { tags: n.data.tags ?? [] };
    roots[name] = path.join(root, n.data.root);
  }
  const dependencies = {};
  for (const [src, deps] of Object.entries(raw.dependencies)) dependencies[src] = deps.map((d) => ({ target: d.target, type: d.type }));
  for (const edge of scanImports(root, roots))
    (dependencies[edge.source] ??= []).push({ target: edge.target, type: `${edge.typeOnly ? 'type-only import' : 'import'} in ${edge.file}`, typeOnly: edge.typeOnly });
  return { nodes, dependencies };
}

const SOURCE_EXT = /\.(c|m)?(t|j)sx?$/;
const SKIP_DIRS = new Set(['node_modules', 'dist', 'build', '.next', '.nx', 'coverage']);
// `import type {…} from` / `export type {…} from` (not `import type from '…'`, a default import named type).
const TYPE_ONLY_RE = /^(?:import|export)\s+type\s+(?!from\b)/;
const IMPORT_RE = /(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|import\s*\(\s*['"]([^'"]+)['"]\s*\)|require\(\s*['"]([^'"]+)['"]\s*\)|import\s+['"]([^'"]+)['"]/g;

/** Edges from import specifiers in each project's source files to other workspace projects. */
function scanImports(root, roots) {
  const byPackage = {};
  for (const [name, dir] of Object.entries(roots)) {
    const pj = path.join(dir, 'package.json');
    if (fs.existsSync(pj)) byPackage[JSON.parse(fs.readFileSync(pj, 'utf8')).name] = name;
  }
  // Longest root first, so a file belongs to its innermost project.
  const ordered = Object.entries(roots).sort((a, b) => b[1].length - a[1].length);
  const owner = (file) => ordered.find(([, dir]) => file === dir || file.startsWith(dir + path.sep))?.[0];
  const edges = [];
  const walk = (dir, project) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      if (SKIP_DIRS.has(e.name)) continue;
      const p = path.join(dir, e.name);
      if (e.isDirectory()) {
        if (owner(p) === project) walk(p, project);
        continue;
      }
      if (!SOURCE_EXT.test(e.name)) continue;
      const text = fs.readFileSync(p, 'utf8');
      for (const m of text.matchAll(IMPORT_RE)) {
        const spec = m[1] ?? m[2] ?? m[3] ?? m[4];
        let target;
        if (spec.startsWith('.')) target = owner(path.resolve(path.dirname(p), spec));
        else {
          const pkg = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0];
          target = byPackage[pkg];
        }
        if (target && target !== project) edges.push({ source: project, target, file: path.relative(root, p), typeOnly: TYPE_ONLY_RE.test(m[0]) });
      }
    }
  };
  for (const [name, dir] of Object.entries(roots)) if (path.resolve(dir) !== path.resolve(root)) walk(dir, name);
  return edges;
}

module.exports = { violations, readGraph, scanImports, RULES };

if (require.main === module) {
  const root = path.resolve(__dirname, '../..');
  const graph = readGraph(root);
  const v = violations(graph);
  const edges = Object.values(graph.dependencies).flat().filter((d) => graph.nodes[d.target]).length;
  if (v.length) {
    console.error(`Dependency rules broken (${v.length}):\n  ${v.join('\n  ')}`);
    process.exit(1);
  }
  console.log(`boundaries: ${Object.keys(graph.nodes).length} projects, ${edges} workspace edges, no violations`);
}
