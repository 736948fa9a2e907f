// Prints the import map that lets a browser load @langchain/langgraph-sdk's ESM files straight
// from node_modules (no bundler): every bare specifier reachable from the SDK's entry point,
// resolved with node's own ESM resolver, scoped to the package directory that imports it.
// Run as: node --conditions=browser --experimental-import-meta-resolve importmap.mjs
// (tests/integration/test_browser.py), so packages' "browser" export conditions apply.
import { readFileSync } from "node:fs";
import { pathToFileURL, fileURLToPath } from "node:url";
import path from "node:path";

const root = path.dirname(fileURLToPath(import.meta.url));
const entry = import.meta.resolve("@langchain/langgraph-sdk/client", pathToFileURL(root + "/"));
const IMPORT = /(?:import|export)\s*(?:[^'"()]*?\sfrom\s*)?["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)/g;
const toUrl = (file) => "/" + path.relative(root, fileURLToPath(file)).split(path.sep).join("/");
const packageDir = (file) => {
  let dir = path.dirname(fileURLToPath(file));
  while (!dir.endsWith(path.sep + "node_modules") && dir !== root) {
    try {
      readFileSync(path.join(dir, "package.json"));
      return dir;
    } catch {
      dir = path.dirname(dir);
    }
  }
  return dir;
};

// A package.json "browser" object swaps node-only files for browser ones, as bundlers read it;
// an import map does the same by remapping the swapped file's URL.
const browserSwaps = (file) => {
  const dir = packageDir(file);
  let swaps = {};
  try {
    const browser = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8")).browser;
    if (browser && typeof browser === "object") swaps = browser;
  } catch {}
  const relative = "./" + path.relative(dir, fileURLToPath(file)).split(path.sep).join("/");
  const target = swaps[relative];
  return typeof target === "string" ? pathToFileURL(path.join(dir, target)).href : null;
};
// A CommonJS-only package a browser cannot import, mapped to an ES module of the same API
// that node_modules already holds (p-queue 6, what @langchain/core and langsmith import and
// only call when tracing, to the p-queue 9 the SDK itself ships), as a bundler's alias would.
const ESM_ALIASES = {
  "p-queue": "node_modules/@langchain/langgraph-sdk/dist/node_modules/.pnpm/p-queue@9.1.0/node_modules/p-queue/dist/index.js",
};
const isEsm = (url) => {
  const file = fileURLToPath(url);
  if (file.endsWith(".mjs")) return true;
  try {
    return JSON.parse(readFileSync(path.join(packageDir(url), "package.json"), "utf8")).type === "module";
  } catch {
    return false;
  }
};
// Node built-ins a module imports at load time without using them on the client's path.
const imports = { "node:async_hooks": "/browser_stubs/async_hooks.mjs" };
const scopes = {};
const nodeImports = {};
const seen = new Set();
const queue = [entry];
while (queue.length) {
  let file = queue.pop();
  const swapped = browserSwaps(file);
  if (swapped) {
    imports[toUrl(file)] = toUrl(swapped);
    file = swapped;
  }
  if (seen.has(file)) continue;
  seen.add(file);
  const source = readFileSync(fileURLToPath(file), "utf8");
  for (const match of source.matchAll(IMPORT)) {
    const spec = match[1] || match[2];
    if (spec.startsWith("node:")) {
      (nodeImports[spec] ??= []).push(toUrl(file));
      continue;
    }
    let resolved;
    try {
      resolved = import.meta.resolve(spec, file);
    } catch {
      continue; // an optional import the SDK guards (react, …): not on the client's path
    }
    if (!resolved.startsWith("file:")) continue;
    if (!spec.startsWith(".") && !spec.startsWith("/")) {
      if (ESM_ALIASES[spec] && !isEsm(resolved)) resolved = pathToFileURL(path.join(root, ESM_ALIASES[spec])).href;
      const scope = toUrl(pathToFileURL(packageDir(file))) + "/";
      (scopes[scope] ??= {})[spec] = toUrl(resolved);
    }
    queue.push(resolved);
  }
}
console.log(JSON.stringify({ entry: toUrl(entry), importmap: { imports, scopes }, files: seen.size, nodeImports }));
