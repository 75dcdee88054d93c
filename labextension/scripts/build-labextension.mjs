// Builds the prebuilt extension into ../agentloop_nb/labextension with @jupyterlab/builder,
// taking JupyterLab's core metadata (shared and singleton packages) from the npm package
// @jupyterlab/core-meta, so the build needs Node only, not the jupyterlab Python package.
//   node scripts/build-labextension.mjs [--development]
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const core = join(root, '.core');
mkdirSync(core, { recursive: true });
// The builder reads <core-path>/package.json: core-meta ships that file as core.package.json.
copyFileSync(require.resolve('@jupyterlab/core-meta/core.package.json'), join(core, 'package.json'));

const builder = require.resolve('@jupyterlab/builder/lib/build-labextension.js');
const args = [builder, '--core-path', core];
if (process.argv.includes('--development')) {
  args.push('--development');
}
args.push(root);
const result = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
process.exit(result.status ?? 1);
