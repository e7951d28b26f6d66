import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
const dir = mkdtempSync(join(tmpdir(), 'il-'));
const t = new StdioClientTransport({ command: '/tmp/il-interop', args: ['serve','--stdio','--data',dir], stderr: 'pipe', env: {...process.env, MCP_DRY_RUN: process.argv[2] ?? 'true'} });
t.stderr.on('data', d => process.stderr.write('[stderr] '+d));
const c = new Client({ name: 'x', version: '0' });
await c.connect(t);
console.log('server', c.getServerVersion(), JSON.stringify(c.getServerCapabilities()));
const tl = await c.listTools();
console.log(JSON.stringify(tl, null, 1));
for (const [n,a] of [['get_customer',{id:'acct_9931'}],['send_reminder',{customer_id:'acct_9931'}],['send_reminder',{customer_id:'acct_9931',__confirm:true}],['get_customer',{id:5}],['refund_invoice',{invoice_id:'inv_1005',amount:2000,__confirm:true}]]) {
  try { const r = await c.callTool({name:n, arguments:a}); console.log(n, JSON.stringify(a), '=>', JSON.stringify(r, null, 1)); }
  catch (e) { console.log(n, 'THREW', e); }
}
await c.close();
