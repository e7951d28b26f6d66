// Node 20 has no fs.globSync, which the conformance suite imports. Loaded
// with --import, this hook hands every module but fs-glob.mjs itself a fs
// that has the glob package's globSync in its place. Newer Nodes skip it.
import fs from "node:fs";
import { register } from "node:module";

if (typeof fs.globSync !== "function") {
  register("./node20-hooks.mjs", import.meta.url);
}
