import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
const dir = mkdtempSync(join(tmpdir(), 'il-'));
const t = new StdioClientTransport({ command: '/tmp/il-interop', args: ['serve','--stdio','--data',dir], env: {...process.env, MCP_DRY_RUN: 'false'} });
const c = new Client({ name: 'x', version: '0' });
await c.connect(t);
console.log('pid', t.pid);
for (const [n,a] of [['send_reminder',{customer_id:'acct_9931',__confirm:true}],['list_invoices',{customer_id:'acct_1024'}],['refund_invoice',{invoice_id:'inv_1005',amount:2000,__confirm:true}],['list_invoices',{customer_id:'acct_1024'}],['get_customer',{id:'nope'}],['send_reminder',{customer_id:'acct_9931',__confirm:'true'}],['send_reminder',{customer_id:'acct_9931',__confirm:false}]]) {
  try { const r = await c.callTool({name:n, arguments:a}); console.log(n, JSON.stringify(a), '=>', JSON.stringify(r)); }
  catch (e) { console.log(n, 'THREW', e); }
}
await c.close();
