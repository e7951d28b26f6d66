import { startHttp } from './helpers.mjs';
for (const stateless of [false, true]) {
  let t0 = Date.now();
  const gw = await startHttp({ stateless });
  console.log('start', Date.now()-t0); t0 = Date.now();
  await gw.client.listTools();
  console.log('list', Date.now()-t0); t0 = Date.now();
  if (gw.transport.sessionId) { await gw.transport.terminateSession(); console.log('terminate', Date.now()-t0); t0 = Date.now(); }
  await gw.client.close();
  console.log('client.close', Date.now()-t0); t0 = Date.now();
  gw.child.kill('SIGTERM');
  await new Promise(r => gw.child.once('exit', (c,s) => { console.log('exit', c, s); r(); }));
  console.log('child exit', Date.now()-t0);
  console.log(gw.stderr().split('\n').slice(-5).join('\n'));
}
