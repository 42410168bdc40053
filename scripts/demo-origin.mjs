// A small demo origin for proxy mode (docs/api/proxy.md): the API a
// provider would put behind Gatehouse. It refuses requests the gateway did not sign, answers a
// tiny shop API, sends an `order.created` event back through the gateway for every new order,
// and receives the gateway's webhooks at /webhook, printing each one.
//
//   node scripts/demo-origin.mjs PORT GATEWAY_URL ORIGIN_SECRET EVENTS_SECRET
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';

const [port, gateway, secret, eventsSecret] = process.argv.slice(2);
if (!port || !gateway || !secret || !eventsSecret) {
  console.error('usage: node scripts/demo-origin.mjs PORT GATEWAY_URL ORIGIN_SECRET EVENTS_SECRET');
  process.exit(2);
}

/** The check every origin behind Gatehouse makes (docs/api/proxy.md shows the same lines). */
function fromGatehouse(req, body) {
  const h = (name) => req.headers[name] ?? '';
  const ts = Number(h('x-gatehouse-timestamp'));
  if (!Number.isInteger(ts) || Math.abs(Date.now() / 1000 - ts) > 300) return false;
  // The SHA-256 of exactly these bytes, or UNSIGNED-PAYLOAD for a body over 1 MiB the gateway
  // streamed (this demo takes those too; an origin that needs the body signed refuses them).
  const bodyHash = h('x-gatehouse-content-sha256');
  if (bodyHash !== 'UNSIGNED-PAYLOAD' && bodyHash !== createHash('sha256').update(body).digest('hex')) return false;
  const signed = ['v2', ts, req.method, req.url, h('x-request-id'), h('x-gatehouse-project-id'),
    h('x-gatehouse-key-id'), h('x-gatehouse-key-type'), h('x-gatehouse-client-ip'), bodyHash].join('\n');
  const expected = Buffer.from(`v2=${createHmac('sha256', secret).update(signed).digest('hex')}`);
  const got = Buffer.from(h('x-gatehouse-signature'));
  return got.length === expected.length && timingSafeEqual(got, expected);
}

const products = [{ sku: 'tea', name: 'Green tea', price: 4 }, { sku: 'coffee', name: 'Coffee beans', price: 9 }];
const orders = [];
const started = Date.now();

function send(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    const body = Buffer.concat(chunks);
    const path = req.url.split('?')[0];
    if (path === '/webhook') {
      console.log(`[demo origin] webhook received: ${req.headers['x-gatehouse-event']} ${body}`);
      return send(res, 200, { ok: true });
    }
    if (!fromGatehouse(req, body)) return send(res, 401, { error: 'not signed by Gatehouse' });
    const project = req.headers['x-gatehouse-project-id'];
    console.log(`[demo origin] ${req.method} ${req.url} from key ${req.headers['x-gatehouse-key-id']} (${req.headers['x-gatehouse-key-type']}) at ${req.headers['x-gatehouse-client-ip']} (request ${req.headers['x-request-id']})`);
    if (req.method === 'GET' && path === '/shop/v1/products') return send(res, 200, { data: products });
    if (req.method === 'POST' && path === '/shop/v1/orders') {
      let input;
      try { input = JSON.parse(body.toString() || '{}'); } catch { return send(res, 400, { error: 'malformed JSON' }); }
      const order = { id: `ord_${orders.length + 1}`, sku: input.sku ?? 'tea', qty: input.qty ?? 1, status: 'created' };
      orders.push(order);
      // The origin's own event, fanned out by the gateway's webhook engine to the project's subscribers.
      const sent = await fetch(`${gateway}/admin/v1/projects/${project}/events`, {
        method: 'POST',
        headers: { authorization: `Bearer ${eventsSecret}`, 'content-type': 'application/json', 'idempotency-key': `order-${started}-${order.id}` },
        body: JSON.stringify({ type: 'order.created', data: order }),
      }).catch((e) => ({ status: String(e) }));
      console.log(`[demo origin] order ${order.id} created; event order.created → ${sent.status}`);
      return send(res, 201, order);
    }
    return send(res, 404, { error: 'no such route at the origin' });
  });
}).listen(Number(port), '127.0.0.1', () => console.log(`[demo origin] listening on http://127.0.0.1:${port}`));
