// Bundles the console into dist/: index.html, one JS and one CSS file with content hashes
// in their names, every URL relative (the app lives under /ui/). Nothing inline, no eval:
// it runs under "default-src 'self'; img-src 'self' data:; style-src 'self'; connect-src 'self'".
import { build } from "esbuild";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist");
const dev = process.argv.includes("--dev");

await rm(out, { recursive: true, force: true });
await mkdir(out, { recursive: true });

const result = await build({
  absWorkingDir: root,
  entryPoints: { app: "src/main.tsx" },
  bundle: true,
  outdir: out,
  entryNames: "[name]-[hash]",
  assetNames: "[name]-[hash]",
  format: "esm",
  target: ["chrome109", "firefox115", "safari16"],
  jsx: "automatic",
  jsxImportSource: "preact",
  minify: !dev,
  sourcemap: dev ? "linked" : false,
  legalComments: "linked",
  metafile: true,
  logLevel: "warning",
});

const outputs = Object.keys(result.metafile.outputs).map((p) => basename(p));
const js = outputs.find((f) => f.endsWith(".js"));
const css = outputs.find((f) => f.endsWith(".css"));
if (!js || !css) throw new Error(`esbuild wrote no JS or CSS: ${outputs.join(", ")}`);

const html = `<!doctype html>
<html lang="en" data-theme="light">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <meta name="color-scheme" content="light" />
    <title>agentfleet</title>
    <link rel="icon" href="data:," />
    <link rel="stylesheet" href="./${css}" />
    <script type="module" src="./${js}"></script>
  </head>
  <body>
    <div id="app"></div>
    <noscript>The agentfleet console needs JavaScript.</noscript>
  </body>
</html>
`;
await writeFile(join(out, "index.html"), html);
console.log(`dist/: index.html ${outputs.join(" ")}`);
