// Issue 34: public/openapi.json describes every event type's delivery (OpenAPI 3.1 `webhooks`),
// and real deliveries of each — caused by real requests, and the usage events' samples — match
// those schemas, body and headers. (usage.test.mjs holds real usage.hourly and usage.adjustment
// deliveries against them too.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { call, createKey, createProject, idemKey, receiver } from './harness.mjs';
import { deliveryViolations, openapi } from './schema.mjs';

test('a delivery of every event type matches its OpenAPI webhooks schema, body and headers', { timeout: 120_000 }, async () => {
  const hooks = await receiver();
  try {
    const types = Object.keys(openapi.webhooks);
    assert.deepEqual(types.sort(), ['contact.created', 'message.created', 'release_marker.created', 'scenario.run.started', 'usage.adjustment', 'usage.hourly']);
    const { projectId, owner } = await createProject('webhook payloads', { plan: 'business' });
    const server = await createKey(owner.key, 'server');
    const cicd = await createKey(owner.key, 'cicd');
    const path = hooks.endpoint(() => 200, 'every-type');
    const hook = await call('POST', '/public/v1/webhooks', { key: owner.key, body: { url: hooks.url + path, events: types } });
    assert.equal(hook.status, 201, hook.text);

    const contact = await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'Ada', email: 'ada@example.com' } });
    assert.equal(contact.status, 201, contact.text);
    const message = await call('POST', '/public/v1/messages', { key: server.key, body: { contact_id: contact.body.id, text: 'hello' } });
    assert.equal(message.status, 201, message.text);
    const scenario = await call('POST', '/public/v1/scenarios', { key: server.key, body: { name: 'onboarding' } });
    const run = await call('POST', `/public/v1/scenarios/${scenario.body.id}/run`, { key: server.key, body: { contact_id: contact.body.id, variables: { step: 1 } } });
    assert.equal(run.status, 202, run.text);
    const marker = await call('POST', `/api/v1/projects/${projectId}/release-markers/deploy`, { key: cicd.key, idem: idemKey(), body: { version: 'v1.2.3', ts: 1796200000, environment: 'production' } });
    assert.equal(marker.status, 201, marker.text);
    for (const type of ['usage.hourly', 'usage.adjustment']) {
      const sample = await call('POST', '/public/v1/webhooks/trigger', { key: owner.key, body: { type } });
      assert.equal(sample.status, 202, sample.text);
    }

    assert.ok(await hooks.waitFor(path, types.length, 60_000), `${hooks.requestsTo(path).length} of ${types.length} deliveries`);
    const received = hooks.requestsTo(path);
    assert.deepEqual(received.map((r) => JSON.parse(r.body).type).sort(), [...types].sort());
    for (const request of received) {
      assert.deepEqual(deliveryViolations(request), [], `${JSON.parse(request.body).type}: ${request.body}`);
    }
    // The check can fail: a changed body or a missing header is caught.
    const [first] = received;
    const changed = { ...first, body: JSON.stringify({ ...JSON.parse(first.body), data: { surprise: true } }) };
    assert.notDeepEqual(deliveryViolations(changed), []);
    const { 'webhook-signature': _, ...unsigned } = first.headers;
    assert.ok(deliveryViolations({ ...first, headers: unsigned }).includes('header webhook-signature is missing'));
  } finally {
    await hooks.close();
  }
});
