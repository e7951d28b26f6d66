// node:fs with the glob package's globSync, for Node 20 (see node20.mjs).
export * from "node:fs";
export { default } from "node:fs";
export { globSync } from "glob";
