// The reference servers behind interlock work as they do directly. One
// feature script runs with the same client against
// @modelcontextprotocol/server-everything (as a stdio child and as a
// streamable HTTP upstream) and @modelcontextprotocol/server-filesystem (as a
// stdio child), first directly, then through `interlock serve` (HTTP with
// sessions, and --stdio). Each feature must work through interlock exactly
// when it works directly, and give the same answer, apart from what the gate
// deliberately changes in a tool definition (see compareTools). A table of
// every feature, direct and through, per transport, is printed.
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';

import {
  CreateMessageRequestSchema,
  CreateTaskResultSchema,
  ElicitRequestSchema,
  GetTaskResultSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
  CallToolResultSchema,
} from '@modelcontextprotocol/sdk/types.js';

import { EVERYTHING, SDK1, SDK2, removeDir, startEverythingHttp, startHttp, startStdio, tempDataDir } from './harness.mjs';

const SLOW = { timeout: 120_000 };
const FILESYSTEM = fileURLToPath(
  new URL('./node_modules/@modelcontextprotocol/server-filesystem/dist/index.js', import.meta.url),
);
const ROOT_NAME = 'interop-root';
const SAMPLED = 'sampled by the interop client';

// What the client answers when a server asks it something.
function handlers(sdk, rootUri, seen) {
  const roots = () => ({ roots: [{ uri: rootUri, name: ROOT_NAME }] });
  const sample = (req) => ({
    model: 'interop-model',
    role: 'assistant',
    stopReason: 'endTurn',
    content: { type: 'text', text: `${SAMPLED}: ${req.params.messages?.[0]?.content?.text ?? ''}` },
  });
  const elicit = (req) => {
    seen.elicitations.push(req.params);
    return { action: 'accept', content: { name: 'Ada Lovelace', check: true } };
  };
  const on = (kind) => (n) => seen[kind].push(n.params);
  return (client) => {
    if (sdk === SDK1) {
      client.setRequestHandler(ListRootsRequestSchema, roots);
      client.setRequestHandler(CreateMessageRequestSchema, sample);
      client.setRequestHandler(ElicitRequestSchema, elicit);
      client.setNotificationHandler(LoggingMessageNotificationSchema, on('logs'));
      client.setNotificationHandler(ResourceUpdatedNotificationSchema, on('updated'));
      client.setNotificationHandler(ResourceListChangedNotificationSchema, on('resourcesChanged'));
      client.setNotificationHandler(ToolListChangedNotificationSchema, on('toolsChanged'));
    } else {
      client.setRequestHandler('roots/list', roots);
      client.setRequestHandler('sampling/createMessage', sample);
      client.setRequestHandler('elicitation/create', elicit);
      client.setNotificationHandler('notifications/message', on('logs'));
      client.setNotificationHandler('notifications/resources/updated', on('updated'));
      client.setNotificationHandler('notifications/resources/list_changed', on('resourcesChanged'));
      client.setNotificationHandler('notifications/tools/list_changed', on('toolsChanged'));
    }
  };
}

const CAPABILITIES = {
  roots: { listChanged: true },
  sampling: {},
  elicitation: { form: {}, url: {} },
};

function newSeen() {
  return { logs: [], updated: [], resourcesChanged: [], toolsChanged: [], elicitations: [] };
}

// waitFor polls cond every 50 ms until it holds or ms pass.
async function waitFor(cond, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (cond()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return cond();
}

// modern reports whether the connection speaks 2026-07-28 or later.
function modern(c) {
  return (c.client.getNegotiatedProtocolVersion?.() ?? '') >= '2026-07-28';
}

// subscribe asks for the notifications filter names: on a connection of
// 2026-07-28 by opening a subscriptions/listen stream, before that by
// resources/subscribe for each resource (list changes come unasked).
// Returns { close() }.
async function subscribe(c, filter) {
  if (modern(c)) return c.client.listen(filter);
  for (const uri of filter.resourceSubscriptions ?? []) await c.client.subscribeResource({ uri });
  return {
    close: async () => {
      for (const uri of filter.resourceSubscriptions ?? []) await c.client.unsubscribeResource({ uri });
    },
  };
}

// call is callTool for either SDK.
function call(conn, params, opts = {}) {
  return conn.sdk === SDK1 ? conn.client.callTool(params, undefined, opts) : conn.client.callTool(params, opts);
}

// ranOk asserts a tool result that is not an error and returns it.
function ranOk(res) {
  assert.notEqual(res.isError, true, `tool failed: ${JSON.stringify(res).slice(0, 500)}`);
  return res;
}

// A tool result as two runs can compare: what varies from run to run (a
// timestamp, a random number) is named in drop.
function stable(res) {
  // Dynamic resources name the time they were made.
  const text = JSON.stringify(res)
    .replace(/\d{1,2}:\d{2}:\d{2}(\s?[AP]M)?/g, 'TIME')
    .replace(/\d{4}-\d{2}-\d{2}T[\d:.]+Z/g, 'TIME');
  const out = JSON.parse(text);
  delete out._meta;
  return out;
}

const isErrorBody = (s) =>
  Array.isArray(s?.required) && ['code', 'retriable', 'message', 'recovery_hint'].every((k) => s.required.includes(k));

// The gate's deliberate changes to a tool: the annotations state every hint
// (so an unstated one takes its stricter spec default), and nothing else; the
// input schema may gain the meta-arguments of the rule's mode; an output
// schema is widened to admit interlock's error body (anyOf [own, error]).
// Every other field must be as the upstream sent it.
function throughTool(t) {
  const out = JSON.parse(JSON.stringify(t));
  const wide = out.outputSchema;
  if (wide?.anyOf?.length === 2 && isErrorBody(wide.anyOf[1])) {
    // The keywords of a schema's root stay at the root of the wider one.
    const own = { ...wide.anyOf[0] };
    for (const k of ['$schema', '$defs', 'definitions']) if (k in wide) own[k] = wide[k];
    out.outputSchema = own;
  }
  for (const k of Object.keys(out.inputSchema?.properties ?? {})) {
    if (k.startsWith('__')) delete out.inputSchema.properties[k];
  }
  return out;
}

function compareTools(direct, through) {
  const byName = new Map(through.map((t) => [t.name, throughTool(t)]));
  assert.deepEqual([...byName.keys()].sort(), direct.map((t) => t.name).sort(), 'tool names');
  for (const d of direct) {
    const t = byName.get(d.name);
    for (const k of Object.keys(d)) {
      if (k === 'annotations') continue;
      assert.deepEqual(t[k], d[k], `${d.name}: ${k}`);
    }
    for (const k of Object.keys(t)) {
      if (k !== 'annotations') assert.ok(k in d, `${d.name}: ${k} was added`);
    }
    // Every hint the upstream stated is kept; the gate only adds hints.
    for (const [k, v] of Object.entries(d.annotations ?? {})) {
      assert.deepEqual(t.annotations?.[k], v, `${d.name}: annotations.${k}`);
    }
    for (const k of Object.keys(t.annotations ?? {})) {
      assert.ok(k.endsWith('Hint') || k in (d.annotations ?? {}), `${d.name}: annotations.${k} was added`);
    }
  }
}

// The features of server-everything. Each returns a value that must be the
// same directly and through interlock (compare, when given, compares them).
const EVERYTHING_FEATURES = [
  {
    name: 'capabilities',
    run: async (c) => c.client.getServerCapabilities(),
    // interlock offers what the upstream offers, less the upstream's
    // tasks, which it refuses (see the tasks feature), and may add
    // completions and tasks of its own (for calls that wait for approval).
    compare: (direct, through) => {
      const { tasks: _t, completions: _c, ...want } = direct;
      const { completions: _c2, tasks: _t2, ...got } = through;
      if (got.extensions) {
        const { 'io.modelcontextprotocol/tasks': _x, ...others } = got.extensions;
        if (Object.keys(others).length === 0) delete got.extensions;
        else got.extensions = others;
      }
      assert.deepEqual(got, want);
    },
  },
  {
    name: 'tools/list',
    run: async (c) => (await c.client.listTools()).tools,
    compare: compareTools,
  },
  {
    name: 'tool results',
    run: async (c) => {
      const out = {};
      out.echo = stable(ranOk(await call(c, { name: 'echo', arguments: { message: 'hi' } })));
      out.sum = stable(ranOk(await call(c, { name: 'get-sum', arguments: { a: 2, b: 3 } })));
      out.structured = stable(ranOk(await call(c, { name: 'get-structured-content', arguments: { location: 'Chicago' } })));
      out.image = stable(ranOk(await call(c, { name: 'get-tiny-image', arguments: {} })));
      out.annotated = stable(
        ranOk(await call(c, { name: 'get-annotated-message', arguments: { messageType: 'success', includeImage: true } })),
      );
      out.reference = stable(
        ranOk(await call(c, { name: 'get-resource-reference', arguments: { resourceType: 'Text', resourceId: 2 } })),
      );
      out.links = stable(ranOk(await call(c, { name: 'get-resource-links', arguments: { count: 2 } })));
      return out;
    },
  },
  {
    name: 'resources',
    run: async (c) => {
      const { resources } = await c.client.listResources();
      const staticDoc = resources.find((r) => r.uri.startsWith('demo://resource/static/'));
      const read = await c.client.readResource({ uri: staticDoc.uri });
      const dynamic = await c.client.readResource({ uri: 'demo://resource/dynamic/text/1' });
      return { uris: resources.map((r) => r.uri).sort(), read: read.contents, dynamic: dynamic.contents.map((x) => x.uri) };
    },
  },
  {
    name: 'templates',
    run: async (c) => (await c.client.listResourceTemplates()).resourceTemplates,
  },
  {
    name: 'subscribe + updated',
    run: async (c) => {
      const uri = 'demo://resource/dynamic/text/1';
      // From 2026-07-28 on a client subscribes on a subscriptions/listen
      // stream; before, with resources/subscribe.
      const sub = await subscribe(c, { resourceSubscriptions: [uri] });
      ranOk(await call(c, { name: 'toggle-subscriber-updates', arguments: {} }));
      try {
        const got = await waitFor(() => c.seen.updated.some((u) => u.uri === uri), 8_000);
        assert.ok(got, 'no notifications/resources/updated within 8 s');
      } finally {
        await call(c, { name: 'toggle-subscriber-updates', arguments: {} });
        await sub.close();
      }
      return uri;
    },
  },
  {
    name: 'prompts',
    run: async (c) => {
      const { prompts } = await c.client.listPrompts();
      const simple = await c.client.getPrompt({ name: 'simple-prompt' });
      const args = await c.client.getPrompt({ name: 'args-prompt', arguments: { city: 'Paris', state: 'TX' } });
      return { names: prompts.map((p) => p.name).sort(), simple: simple.messages, args: args.messages };
    },
  },
  {
    name: 'completion',
    run: async (c) => {
      const { completion } = await c.client.complete({
        ref: { type: 'ref/prompt', name: 'completable-prompt' },
        argument: { name: 'department', value: 'E' },
      });
      return completion.values;
    },
  },
  {
    name: 'logging',
    run: async (c) => {
      // A client of 2026-07-28 names its level in each request; an
      // earlier one sets it once.
      const params = { name: 'toggle-simulated-logging', arguments: {} };
      if (c.sdk === SDK1) await c.client.setLoggingLevel('debug');
      else params._meta = { 'io.modelcontextprotocol/logLevel': 'debug' };
      const before = c.seen.logs.length;
      ranOk(await call(c, params));
      try {
        // The server logs at once and then every 5 s, at a random level,
        // whether a call is in flight or not. A shared link can tell whose
        // a log message is only while that client's call is in flight (see
        // docs/upstreams.md), so one is. Without a session a level set by
        // logging/setLevel lasts only its own request, and the rest log at
        // info: a debug message is rightly dropped there, so a busy call
        // that heard only that is followed by another (each has a 7 in 8
        // chance of a message at info or above).
        const busy = { name: 'trigger-long-running-operation', arguments: { duration: 6, steps: 2 }, _meta: params._meta };
        let heard = false;
        for (let i = 0; i < 5 && !heard; i++) {
          ranOk(await call(c, busy));
          heard = await waitFor(() => c.seen.logs.length > before, 1_000);
        }
        assert.ok(heard, 'no log message within five calls');
      } finally {
        await call(c, { name: 'toggle-simulated-logging', arguments: {} });
      }
      return true;
    },
  },
  {
    name: 'progress',
    run: async (c) => {
      const progress = [];
      const res = ranOk(
        await call(
          c,
          { name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 2 } },
          { onprogress: (p) => progress.push(p.progress) },
        ),
      );
      // How many arrive before the result is a race in the client (see
      // passthrough.test.mjs); that some arrive is what must hold.
      assert.ok(progress.length >= 1, `no progress: ${JSON.stringify(res)}`);
      return true;
    },
  },
  {
    name: 'cancellation',
    run: async (c) => {
      const ac = new AbortController();
      const started = Date.now();
      setTimeout(() => ac.abort('interop cancels'), 300);
      await assert.rejects(
        call(c, { name: 'trigger-long-running-operation', arguments: { duration: 20, steps: 20 } }, { signal: ac.signal }),
      );
      assert.ok(Date.now() - started < 5_000, 'cancelling took too long');
      // The connection serves the next call.
      ranOk(await call(c, { name: 'echo', arguments: { message: 'after' } }));
      return true;
    },
  },
  {
    name: 'sampling',
    run: async (c) => {
      const res = ranOk(await call(c, { name: 'trigger-sampling-request', arguments: { prompt: 'ping', maxTokens: 5 } }));
      const text = JSON.stringify(res.content);
      assert.ok(text.includes(SAMPLED), text);
      return res.content.map((x) => x.type);
    },
  },
  {
    name: 'roots',
    run: async (c) => {
      const res = ranOk(await call(c, { name: 'get-roots-list', arguments: {} }));
      const text = res.content.map((x) => x.text).join('\n');
      assert.ok(text.includes(c.rootUri), text);
      return true;
    },
  },
  {
    name: 'elicitation',
    run: async (c) => {
      const res = ranOk(await call(c, { name: 'trigger-elicitation-request', arguments: {} }));
      const text = res.content.map((x) => x.text).join('\n');
      assert.ok(text.includes('Ada Lovelace'), text);
      return c.seen.elicitations.at(-1);
    },
    // A form is sent with mode "form" even where the server left it out
    // (the specification's default): the SDK interlock is built on always
    // names it.
    compare: (direct, through) => {
      const { mode, ...rest } = through;
      assert.ok(mode === undefined || mode === 'form' || mode === direct.mode, `mode ${mode}`);
      assert.deepEqual(rest, (({ mode: _m, ...r }) => r)(direct));
    },
  },
  {
    name: 'list_changed',
    run: async (c) => {
      const before = c.seen.resourcesChanged.length;
      const sub = await subscribe(c, { resourcesListChanged: true });
      try {
        ranOk(
          await call(c, {
            name: 'gzip-file-as-resource',
            arguments: { name: `interop-${c.label.replace(/\W+/g, '-')}.gz`, data: 'data:text/plain;base64,aGVsbG8=' },
          }),
        );
        assert.ok(
          await waitFor(() => c.seen.resourcesChanged.length > before, 3_000),
          'no notifications/resources/list_changed within 3 s',
        );
      } finally {
        await sub.close();
      }
      return true;
    },
  },
  {
    name: 'tasks',
    run: async (c) => {
      const created = await c.client.request(
        { method: 'tools/call', params: { name: 'simulate-research-query', arguments: { topic: 'mcp' }, task: { ttl: 60_000 } } },
        CreateTaskResultSchema,
      );
      const id = created.task.taskId;
      let status = created.task.status;
      const end = Date.now() + 20_000;
      while (status !== 'completed' && status !== 'failed' && Date.now() < end) {
        await new Promise((r) => setTimeout(r, 200));
        status = (await c.client.request({ method: 'tasks/get', params: { taskId: id } }, GetTaskResultSchema)).status;
      }
      assert.equal(status, 'completed');
      const res = await c.client.request({ method: 'tasks/result', params: { taskId: id } }, CallToolResultSchema);
      return ranOk(res).content.map((x) => x.type);
    },
    // A client that cannot have tasks through interlock (one of 2026-07-28,
    // or of 2025-11-25 without a session) is told so, never run as a plain
    // call; one of 2025-11-25 on a session gets the server's task.
    refusal: /interlock does not carry task-augmented tool calls \(params.task\) of this protocol version/,
  },
];

// The features of server-filesystem, in a directory of the test's own.
const FILESYSTEM_FEATURES = [
  { name: 'tools/list', run: async (c) => (await c.client.listTools()).tools, compare: compareTools },
  {
    name: 'tool results',
    run: async (c) => {
      const read = ranOk(await call(c, { name: 'read_text_file', arguments: { path: join(c.dir, 'hello.txt') } }));
      const list = ranOk(await call(c, { name: 'list_directory', arguments: { path: c.dir } }));
      return { read: stable(read), list: stable(list) };
    },
  },
  {
    name: 'write (destructive, allowed by rule)',
    run: async (c) => {
      const path = join(c.dir, 'writes', `w-${c.label.replace(/\W+/g, '-')}.txt`);
      ranOk(await call(c, { name: 'write_file', arguments: { path, content: 'written' } }));
      const read = ranOk(await call(c, { name: 'read_text_file', arguments: { path } }));
      return read.content[0].text;
    },
  },
  {
    name: 'roots',
    run: async (c) => {
      // The server replaces its allowed directories with the client's roots,
      // once the roots/list it sends after the handshake is answered.
      let text = '';
      const end = Date.now() + 3_000;
      do {
        const res = ranOk(await call(c, { name: 'list_allowed_directories', arguments: {} }));
        text = res.content.map((x) => x.text).join('\n');
        if (text.includes(c.rootDir)) return true;
        await new Promise((r) => setTimeout(r, 100));
      } while (Date.now() < end);
      assert.fail(text);
    },
  },
];

async function runFeatures(features, conn) {
  const out = {};
  for (const f of features) {
    try {
      out[f.name] = { ok: true, value: await f.run(conn) };
    } catch (err) {
      out[f.name] = { ok: false, error: String(err?.message ?? err).slice(0, 300) };
    }
  }
  return out;
}


// A client connected straight to a server: a stdio command or a URL.
async function connectDirect(sdk, target, setup) {
  const client = new sdk.Client({ name: 'interlock-interop', version: '1.0.0' }, { capabilities: CAPABILITIES });
  setup(client);
  const transport = target.url
    ? new sdk.StreamableHTTPClientTransport(new URL(target.url))
    : new sdk.StdioClientTransport({ command: target.command[0], args: target.command.slice(1), stderr: 'ignore' });
  await client.connect(transport);
  return {
    client,
    close: async () => {
      if (transport.sessionId) await transport.terminateSession().catch(() => {});
      await client.close();
    },
  };
}

// An interlock config with one upstream and a rule that lets every one of
// its tools run: these tests are about what travels, not about the gate.
function writeConfig(dir, upstream) {
  const lines = ['upstreams:', '  - name: ref'];
  if (upstream.perClient) lines.push('    per_client: true');
  if (upstream.url) lines.push(`    url: ${JSON.stringify(upstream.url)}`);
  else lines.push(`    command: [${upstream.command.map((x) => JSON.stringify(x)).join(', ')}]`);
  lines.push('rules:', '  - name: reference-server', '    match: {upstream: ref, tools: ["*"]}', '    mode: allow', '');
  const path = join(dir, 'interlock.yaml');
  writeFileSync(path, lines.join('\n'));
  return path;
}

async function connectThrough(sdk, transport, cfgPath, setup) {
  const clientOptions = { capabilities: CAPABILITIES };
  if (sdk.pin) clientOptions.versionNegotiation = { mode: { pin: sdk.pin } };
  const opts = {
    sdk,
    dryRun: 'false',
    extraArgs: ['--config', cfgPath],
    clientOptions,
    setup,
  };
  if (transport === 'stdio') return startStdio(opts);
  return startHttp({ ...opts, stateless: transport === 'stateless' });
}

// One row of the printed table per feature, a column per connection.
function printTable(title, columns, results, features, sdk) {
  const gapOf = (f, col, error) => gapsFor(sdk, col)[f.name]?.test(error);
  const width = Math.max(...features.map((f) => f.name.length), 8);
  const cell = (f, col) => {
    const r = results[col]?.[f.name];
    const base = results.direct?.[f.name];
    if (!r) return '-';
    if (col === 'direct') return r.ok ? 'works' : 'fails';
    if (!r.ok) {
      if (base && !base.ok) return 'fails (as direct)';
      if (f.refusal?.test(r.error)) return 'refused';
      return gapOf(f, col, r.error) ? 'gap' : 'FAILS';
    }
    if (base?.ok) {
      try {
        if (f.compare) f.compare(dropped(base.value, sdk), r.value);
        else assert.deepEqual(r.value, base.value);
      } catch {
        return 'DIFFERS';
      }
    }
    return 'works';
  };
  const lines = [`\n${title}`, ['feature'.padEnd(width), ...columns].join(' | ')];
  const notes = [];
  for (const f of features) {
    lines.push([f.name.padEnd(width), ...columns.map((col) => cell(f, col).padEnd(col.length))].join(' | '));
    for (const col of columns) {
      const r = results[col]?.[f.name];
      if (r && !r.ok) notes.push(`  ${f.name}, ${col}: ${r.error}`);
    }
  }
  if (notes.length) lines.push('why:', ...notes);
  console.log(lines.join('\n'));
}

// dropped is a direct list of tools less the fields the client drops on
// the protocol it speaks through interlock.
function dropped(value, sdk) {
  if (!sdk.drops || !Array.isArray(value)) return value;
  return value.map((t) => {
    const out = { ...t };
    for (const k of sdk.drops) delete out[k];
    return out;
  });
}

// assertSame checks that each feature works through interlock exactly when
// it works directly, with the same answer.
function assertSame(features, direct, through, label, sdk) {
  const gaps = gapsFor(sdk, label);
  const problems = [];
  for (const f of features) {
    const d = direct[f.name];
    const t = through[f.name];
    if (d.ok && !t.ok) {
      if (f.refusal && f.refusal.test(t.error)) continue;
      if (gaps[f.name]?.test(t.error)) continue;
      problems.push(`${f.name}: works directly, fails through interlock (${label}): ${t.error}`);
    } else if (!d.ok && t.ok) {
      problems.push(`${f.name}: fails directly (${d.error}), works through interlock (${label})`);
    } else if (d.ok) {
      try {
        if (f.compare) f.compare(dropped(d.value, sdk), t.value);
        else assert.deepEqual(t.value, d.value);
      } catch (err) {
        problems.push(`${f.name}: differs through interlock (${label}): ${err.message.slice(0, 600)}`);
      }
    }
  }
  assert.deepEqual(problems, [], problems.join('\n'));
}

// What a client of 2025-11-25 cannot have through `interlock serve
// --stateless`, and the clear failure it gets instead. Directly, the
// reference servers have sessions, and that is what "works directly"
// means here too: the same server, the same client, and interlock without
// sessions must match it feature by feature but for these. Without a
// session the gateway cannot send such a client a request (sampling,
// roots, a form: the upstream is refused, a form answered cancel) nor
// anything outside a call's own response stream (list_changed,
// resources/updated). What a call streams back itself (progress, log
// messages, its result) is carried.
const STATELESS_GAPS = {
  'subscribe + updated': /no notifications\/resources\/updated/,
  list_changed: /no notifications\/resources\/list_changed/,
  // -32601 (the client does not offer sampling); the go-sdk interlock's
  // link is built on words every -32601 as "method not found".
  sampling: /no client can answer|does not offer sampling|method not found: \\?"sampling\/createMessage/,
  roots: /no roots are currently configured|Allowed directories/,
  elicitation: /cancelled the elicitation|CANCELLED/,
};

// gapsFor is what a connection (a column of the table) may lack.
function gapsFor(sdk, column) {
  return column === STATELESS ? { ...sdk.gaps, ...STATELESS_GAPS } : (sdk.gaps ?? {});
}

const STATELESS = 'interlock http stateless';

// What may fail directly, by scenario and client ("title, sdk name"):
// nothing so far. A feature that fails directly is left out of every
// comparison through interlock, so a baseline that quietly broke would
// hide every difference; one that stops working directly after an upgrade
// of a server or an SDK is named here, with why, until it works again.
const FAILS_DIRECTLY = {};

const SCENARIOS = [
  { title: 'server-everything, stdio child', server: 'everything', upstream: 'stdio', features: EVERYTHING_FEATURES },
  { title: 'server-everything, streamable HTTP upstream', server: 'everything', upstream: 'http', features: EVERYTHING_FEATURES },
  { title: 'server-filesystem, stdio child', server: 'filesystem', upstream: 'stdio', features: FILESYSTEM_FEATURES },
];

// Client 2.x as it comes negotiates 2025-11-25, as server-everything
// does; pinned to 2026-07-28 it can talk so only to interlock, so its
// direct baseline is the same client unpinned.
const SDK2_PINNED = {
  ...SDK2,
  name: '@modelcontextprotocol/client 2.x pinned to 2026-07-28',
  pin: '2026-07-28',
  // What such a client cannot have through interlock from a server of an
  // earlier protocol, and the clear failure it gets instead: never a hang.
  // It subscribes, and hears of list changes, on a subscriptions/listen
  // stream; the questions these servers push in the middle of a call
  // (sampling, roots, a form) reach it as input requests, while interlock
  // holds the call (see docs/upstreams.md). server-filesystem asks for
  // roots outside any call, as soon as a link is made: such a client can
  // be asked only in a call's result.
  gaps: {
    roots: /Allowed directories/,
  },
  // Client 2.x on 2026-07-28 drops a tool's execution itself.
  drops: ['execution'],
};

for (const sdk of [SDK1, SDK2, SDK2_PINNED]) {
  for (const sc of SCENARIOS) {
    describe(`reference server behind interlock: ${sc.title}, ${sdk.name}`, () => {
      let dir;
      let httpServer;
      const results = {};
      const versions = {};
      const columns = [];
      let upstream;

      before(async () => {
        dir = tempDataDir();
        // The server is started with work; the client's root is a folder
        // inside it, so a server that takes the client's roots shows it.
        const work = join(dir, 'files');
        const rooted = join(work, 'rooted');
        mkdirSync(join(rooted, 'writes'), { recursive: true });
        writeFileSync(join(rooted, 'hello.txt'), 'hello from the interop suite\n');
        // server-filesystem takes the client's roots as the directories it
        // may touch, asked for outside any call: a child shared by every
        // client could not know whose roots to take, so it is per_client.
        if (sc.server === 'filesystem') upstream = { command: [process.execPath, FILESYSTEM, work], perClient: true };
        else if (sc.upstream === 'http') {
          httpServer = await startEverythingHttp();
          upstream = { url: httpServer.url };
        } else upstream = { command: [process.execPath, EVERYTHING, 'stdio'] };
        upstream.dir = rooted;
      }, SLOW);
      after(async () => {
        await httpServer?.close();
        removeDir(dir);
      });

      const run = async (column, connect) => {
        const seen = newSeen();
        const rootDir = upstream.dir;
        const rootUri = `file://${rootDir}`;
        const setup = handlers(sdk, rootUri, seen);
        const conn = await connect(setup);
        versions[column] = conn.client.getNegotiatedProtocolVersion?.() ?? conn.client.transport?.protocolVersion ?? '?';
        try {
          results[column] = await runFeatures(sc.features, {
            client: conn.client,
            sdk,
            seen,
            rootUri,
            rootDir,
            dir: upstream.dir,
            label: `${sdk.name} ${column}`,
          });
          const failed = Object.values(results[column]).some((r) => !r.ok);
          if (failed && conn.stderr) console.log(`--- ${column} stderr (tail) ---\n${conn.stderr().slice(-4000)}`);
        } finally {
          await conn.close();
        }
        columns.push(column);
      };

      it('works directly', SLOW, async () => {
        await run('direct', (setup) => connectDirect(sdk, upstream, setup));
        // The direct run is the baseline: the script itself must be sound.
        // Every feature is tried, and all but those FAILS_DIRECTLY names
        // work.
        const excused = FAILS_DIRECTLY[`${sc.title}, ${sdk.name}`] ?? [];
        assert.deepEqual(Object.keys(results.direct).sort(), sc.features.map((f) => f.name).sort(), 'features tried directly');
        const failing = Object.entries(results.direct)
          .filter(([name, r]) => !r.ok && !excused.includes(name))
          .map(([name, r]) => `${name}: ${r.error}`);
        assert.deepEqual(failing, [], `${sc.title}, ${sdk.name}: fails directly:\n${failing.join('\n')}`);
      });

      // Without sessions, with the client that has them directly (SDK
      // 1.x; a client of 2026-07-28 needs none either way).
      const transports = sdk === SDK1 ? ['http', 'stateless', 'stdio'] : ['http', 'stdio'];
      const named = { http: '(HTTP, sessions)', stateless: '--stateless', stdio: '--stdio' };
      for (const transport of transports) {
        it(`works the same through interlock serve ${named[transport]}`, SLOW, async () => {
          const cfg = writeConfig(dir, upstream);
          const column = transport === 'stateless' ? STATELESS : `interlock ${transport}`;
          await run(column, (setup) => connectThrough(sdk, transport, cfg, setup));
          assertSame(sc.features, results.direct, results[column], column, sdk);
        });
      }

      it('prints the feature table', () => {
        const spoken = columns.map((c) => `${c}: ${versions[c]}`).join(', ');
        printTable(`${sc.title}, ${sdk.name} (protocol ${spoken})`, columns, results, sc.features, sdk);
        assert.ok(columns.includes('direct'));
      });
    });
  }
}

