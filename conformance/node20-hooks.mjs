// Resolution hooks for node20.mjs.
const shim = new URL("./fs-glob.mjs", import.meta.url).href;

export async function resolve(specifier, context, next) {
  if ((specifier === "fs" || specifier === "node:fs") && context.parentURL !== shim) {
    return { url: shim, shortCircuit: true };
  }
  return next(specifier, context);
}
