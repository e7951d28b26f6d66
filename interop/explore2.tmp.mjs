import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
const t = new StdioClientTransport({ command: '/tmp/il-interop', args: ['serve','--stdio','--data','/tmp/tmp.LOD8SCy90M','--config','/tmp/tmp.LOD8SCy90M/cfg.yaml'], stderr: 'pipe', env: {...process.env, MCP_DRY_RUN: process.argv[2] ?? 'true'} });
t.stderr.on('data', d => process.stderr.write('[stderr] '+d));
const c = new Client({ name: 'x', version: '0' });
await c.connect(t);
const tl = await c.listTools();
console.log(JSON.stringify(tl.tools, null, 1));
for (const a of [{ticket_id:'T1'},{ticket_id:'T1',__confirm:true}]) {
  try { const r = await c.callTool({name:'close_ticket', arguments:a}); console.log(JSON.stringify(a), '=>', JSON.stringify(r)); }
  catch (e) { console.log(JSON.stringify(a), 'THREW', e.code, e.message); }
}
await c.close();
