// Writes public/openapi.json, the OpenAPI 3.1 description of every public route. Edit the tables
// here and run `node scripts/openapi.mjs`; a unit test (core::route) fails when the description
// and the router disagree.
import { writeFileSync } from 'node:fs';

const ref = (name) => ({ $ref: `#/components/schemas/${name}` });
const str = { type: 'string' };
const nullable = (schema) => ({ oneOf: [schema, { type: 'null' }] });
const obj = (properties, required = []) => ({ type: 'object', properties, required, additionalProperties: false });
const list = (item) => obj({ data: { type: 'array', items: item }, next_cursor: nullable(str) }, ['data', 'next_cursor']);
const json = (schema) => ({ 'application/json': { schema } });

const rateHeaders = Object.fromEntries(
  ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'RateLimit-Policy', 'RateLimit']
    .map((h) => [h, { $ref: `#/components/headers/${h}` }]),
);
const errors = (...codes) => Object.fromEntries(codes.map((c) => [String(c), { $ref: `#/components/responses/E${c}` }]));
const ok = (status, schema, description = 'OK') => ({
  [status]: { description, headers: { 'X-Request-Id': { $ref: '#/components/headers/X-Request-Id' }, ...rateHeaders }, content: json(schema) },
});
const idemHeader = { $ref: '#/components/parameters/IdempotencyKey' };
const pathParam = (name) => ({ name, in: 'path', required: true, schema: str });
const query = (name, schema, description) => ({ name, in: 'query', schema, description });
const paging = [query('limit', { type: 'integer', minimum: 1, maximum: 200 }), query('cursor', str, 'next_cursor of the previous page')];

const keyed = (security) => ({ security: [{ [security]: [] }] });
const ownerOp = (summary, extra) => ({ summary, ...keyed('apiKey'), ...extra });

const contactIn = obj({ name: str, phone: str, email: str, external_id: str });
const messageIn = obj({ contact_id: str, text: str }, ['contact_id', 'text']);
const bulkIn = (item) => obj({ items: { type: 'array', minItems: 1, maxItems: 100, items: item } }, ['items']);
const mutating = (summary, body, responses, extra = {}) => ({
  summary, ...keyed('apiKey'), parameters: [idemHeader, ...(extra.parameters ?? [])],
  requestBody: { required: true, content: json(body) }, responses,
});

const paths = {
  '/health': { get: { summary: 'Liveness; no credentials, no storage', security: [], responses: { 200: { description: 'OK', content: json(obj({ status: str })) } } } },
  '/admin/v1/health': { get: { summary: 'Deep health: one round trip to a KeyGuard Durable Object', security: [{ adminToken: [] }],
    responses: { 200: { description: 'OK', content: json(obj({ status: str, key_guard: str })) }, ...errors(401), 503: { description: 'SERVICE_UNAVAILABLE', content: json(ref('Error')) } } } },
  '/admin/v1/projects': { post: { summary: 'Create a project and its first owner key', security: [{ adminToken: [] }],
    requestBody: { required: true, content: json(obj({ name: str, plan: { type: 'string', description: 'a plan of PLANS; default trial' } }, ['name'])) },
    responses: { 201: { description: 'Created', content: json(ref('ProjectCreated')) }, ...errors(400, 401, 422) } } },
  '/admin/v1/projects/{id}': { patch: { summary: 'Put a project and all its keys on another plan (only the operator chooses plans)', security: [{ adminToken: [] }],
    parameters: [pathParam('id')],
    requestBody: { required: true, content: json(obj({ plan: str }, ['plan'])) },
    responses: { 200: { description: 'OK', content: json(obj({ project_id: str, name: str, plan: str, keys: { type: 'integer' }, keys_told: { type: 'integer', description: "keys whose guard took the new limits at once; the others read them within 10 minutes" } })) }, ...errors(400, 401, 404, 422), 503: { description: 'SERVICE_UNAVAILABLE', content: json(ref('Error')) } } } },
  '/admin/v1/dead-letters': { get: { summary: 'Queue messages the consumers gave up on, newest first', security: [{ adminToken: [] }],
    parameters: [query('queue', str, 'only letters from this queue, e.g. gatehouse-events'), ...paging],
    responses: { 200: { description: 'OK', content: json(list(ref('DeadLetter'))) }, ...errors(400, 401), 503: { description: 'SERVICE_UNAVAILABLE', content: json(ref('Error')) } } } },
  '/admin/v1/dead-letters/redrive': { post: { summary: 'Send dead letters back to their queues (the named ones, or up to 500 not yet re-driven)', security: [{ adminToken: [] }],
    requestBody: { required: false, content: json(obj({ ids: { type: 'array', minItems: 1, maxItems: 500, items: str } })) },
    responses: { 200: { description: 'OK', content: json(obj({ redriven: { type: 'integer' }, failed: { type: 'integer', description: 'sends that failed; still dead, re-drive again' }, skipped: { type: 'integer', description: 'named ids unknown or re-driven already' } })) }, ...errors(400, 401), 503: { description: 'SERVICE_UNAVAILABLE', content: json(ref('Error')) } } } },
  '/public/v1/me': { get: ownerOp('The calling key, its window and quota', { responses: { ...ok(200, ref('Me')), ...errors(401, 429) } }) },
  '/public/v1/keys': {
    post: mutating('Create a key (the secret is shown only here)', obj({ type: { enum: ['owner', 'server', 'browser', 'cicd'] }, name: str, plan: { type: 'string', description: "only the project's own plan (403 otherwise)" }, rate_limit_per_minute: nullable({ type: 'integer', minimum: 1, description: "at most the plan's per-minute limit (403 above)" }) }, ['type']),
      { ...ok(201, ref('KeyCreated'), 'Created'), ...errors(400, 401, 403, 409, 422, 429) }),
    get: ownerOp('List the project\'s keys', { parameters: paging, responses: { ...ok(200, list(ref('Key'))), ...errors(401, 403, 429) } }),
  },
  '/public/v1/keys/{id}': {
    patch: mutating('Change the name or lower the rate limit (applies at once)', obj({ name: nullable(str), plan: { type: 'string', description: "only the project's own plan (403 otherwise)" }, rate_limit_per_minute: nullable({ type: 'integer', minimum: 1, description: "at most the plan's per-minute limit (403 above)" }) }),
      { ...ok(200, ref('Key')), ...errors(400, 401, 403, 404, 409, 422, 429) }, { parameters: [pathParam('id')] }),
    delete: { ...ownerOp('Revoke a key (applies at once)'), parameters: [idemHeader, pathParam('id')], responses: { ...ok(200, ref('Key')), ...errors(401, 403, 404, 409, 422, 429) } },
  },
  '/public/v1/keys/{id}/stats': { get: ownerOp('Daily counts, top endpoints and error share of a key', {
    parameters: [pathParam('id'), query('days', { type: 'integer', minimum: 1, maximum: 90 })], responses: { ...ok(200, ref('KeyStats')), ...errors(400, 401, 403, 404, 429) } }) },
  '/public/v1/logs': { get: ownerOp('The audit log, newest first', {
    parameters: [query('method', str), query('status', str, '2xx, 4xx, 5xx or a code'), query('path', { type: 'string', maxLength: 200 }, 'glob over the path with its query: * matches any run of characters, everything else itself (case-sensitive); at most 200 characters (422 beyond)'),
      query('request_id', str), query('key_id', str), query('idempotency_key', str),
      query('from', str, 'RFC 3339, YYYY-MM-DD (the day\'s first ms) or Unix ms; a date or time that does not exist (2026-02-31) is a 422'),
      query('to', str, 'RFC 3339, YYYY-MM-DD (the day\'s last ms) or Unix ms; not before from (422)'), ...paging],
    responses: { ...ok(200, list(ref('AuditRow'))), ...errors(400, 401, 403, 422, 429) } }) },
  '/public/v1/logs/archives': { get: ownerOp('Archived days of the log', { responses: { ...ok(200, list(ref('Archive'))), ...errors(401, 403, 429) } }) },
  '/public/v1/logs/archives/{date}': { get: ownerOp('Download one archived day (gzip NDJSON)', {
    parameters: [{ ...pathParam('date'), description: 'YYYY-MM-DD (400 otherwise); a day that does not exist (2026-02-31) is a 422' }], responses: { 200: { description: 'gzip NDJSON: the day\'s objects as consecutive gzip members, one stream to any gunzip', content: { 'application/gzip': { schema: { type: 'string', format: 'binary' } } } }, ...errors(400, 401, 403, 404, 422, 429) } }) },
  '/public/v1/logs/{request_id}': { get: ownerOp('One request of the log', { parameters: [pathParam('request_id')], responses: { ...ok(200, ref('AuditRow')), ...errors(401, 403, 404, 429) } }) },
  '/public/v1/contacts': {
    post: mutating('Create a contact (emits contact.created)', contactIn, { ...ok(201, ref('Contact'), 'Created'), ...errors(400, 401, 403, 409, 413, 422, 429) }),
    get: ownerOp('List contacts', { parameters: paging, responses: { ...ok(200, list(ref('Contact'))), ...errors(400, 401, 403, 429) } }),
  },
  '/public/v1/contacts/bulk': { post: mutating('Create 1–100 contacts, each on its own', bulkIn(contactIn), { ...ok(200, ref('BulkResult')), ...errors(400, 401, 403, 409, 413, 422, 429) }) },
  '/public/v1/contacts/{id}': { get: ownerOp('One contact', { parameters: [pathParam('id')], responses: { ...ok(200, ref('Contact')), ...errors(401, 403, 404, 429) } }) },
  '/public/v1/messages': { post: mutating('Queue a message (emits message.created)', messageIn, { ...ok(201, ref('Message'), 'Created'), ...errors(400, 401, 403, 409, 422, 429) }) },
  '/public/v1/messages/bulk': { post: mutating('Queue 1–100 messages, each on its own', bulkIn(messageIn), { ...ok(200, ref('BulkResult')), ...errors(400, 401, 403, 409, 422, 429) }) },
  '/public/v1/scenarios': { post: mutating('Create a scenario', obj({ name: str }, ['name']), { ...ok(201, obj({ id: str, name: str, created_at: str }), 'Created'), ...errors(400, 401, 403, 409, 422, 429) }) },
  '/public/v1/scenarios/{id}/run': { post: mutating('Start a run (emits scenario.run.started)', obj({ contact_id: str, variables: { type: 'object' } }, ['contact_id']),
    { ...ok(202, obj({ run_id: str, status: { const: 'started' } }), 'Started'), ...errors(400, 401, 403, 404, 409, 422, 429) }, { parameters: [pathParam('id')] }) },
  '/api/v1/projects/{project_id}/release-markers/deploy': { post: {
    summary: 'Record a deploy (cicd keys; Idempotency-Key required, 8–128; a replay answers 200)', ...keyed('apiKey'),
    parameters: [{ ...idemHeader, $ref: undefined, name: 'Idempotency-Key', in: 'header', required: true, schema: { type: 'string', minLength: 8, maxLength: 128 } }, pathParam('project_id')],
    requestBody: { required: true, content: json(obj({ version: str, ts: { oneOf: [{ type: 'integer' }, str] }, environment: str, commit: str }, ['version', 'ts'])) },
    responses: { ...ok(201, ref('ReleaseMarker'), 'Created'), ...ok(200, ref('ReleaseMarker'), 'Replayed'), ...errors(400, 401, 403, 409, 422, 429) } } },
  '/v1/track': { post: { summary: 'Ingest up to 500 events (event_id de-duplication, 48 h)', ...keyed('apiKey'),
    requestBody: { required: true, content: json(obj({ batch: { type: 'array', minItems: 1, maxItems: 500, items: ref('TrackItem') } }, ['batch'])) },
    responses: { ...ok(202, ref('TrackResult'), 'Accepted'), ...errors(400, 401, 403, 413, 422, 429, 500) } } },
  '/v1/identify': { post: { summary: 'Link ids and record an identify event', ...keyed('apiKey'),
    requestBody: { required: true, content: json(obj({ anonymous_id: str, user_id: str, traits: { type: 'object' } }, ['anonymous_id', 'user_id'])) },
    responses: { ...ok(202, obj({ event_id: str }), 'Accepted'), ...errors(400, 401, 403, 422, 429) } } },
  '/v1/alias': { post: { summary: 'Link ids (server keys only)', ...keyed('apiKey'),
    requestBody: { required: true, content: json(obj({ anonymous_id: str, user_id: str }, ['anonymous_id', 'user_id'])) },
    responses: { ...ok(202, obj({ anonymous_id: str, user_id: str }), 'Accepted'), ...errors(400, 401, 403, 422, 429) } } },
  '/v1/replay': { post: { summary: 'Store a session-replay chunk once', ...keyed('apiKey'),
    requestBody: { required: true, content: json(obj({ session_id: str, chunk: { type: 'integer', minimum: 0 }, data: {} }, ['session_id', 'chunk', 'data'])) },
    responses: { ...ok(202, obj({ duplicate: { type: 'boolean' } }), 'Accepted'), ...errors(400, 401, 403, 413, 422, 429) } } },
  '/public/v1/webhooks': {
    post: mutating('Subscribe (the secret is shown only here)', obj({ url: { type: 'string', format: 'uri' }, events: { type: 'array', items: str } }, ['url', 'events']),
      { ...ok(201, ref('WebhookCreated'), 'Created'), ...errors(400, 401, 403, 409, 422, 429) }),
    get: ownerOp('List subscriptions', { responses: { ...ok(200, list(ref('Webhook'))), ...errors(401, 403, 429) } }),
  },
  '/public/v1/webhooks/{id}': { delete: { ...ownerOp('Delete a subscription'), parameters: [idemHeader, pathParam('id')], responses: { ...ok(200, obj({ id: str, status: str })), ...errors(401, 403, 404, 409, 429) } } },
  '/public/v1/webhooks/{id}/deliveries': { get: ownerOp('Deliveries with every attempt', {
    parameters: [pathParam('id'), query('status', { enum: ['pending', 'delivered', 'failed'] }), ...paging], responses: { ...ok(200, list(ref('Delivery'))), ...errors(400, 401, 403, 404, 429) } }) },
  '/public/v1/webhooks/deliveries/{id}/retry': { post: { ...ownerOp('Make a delivery due now (failed ones too)'), parameters: [idemHeader, pathParam('id')],
    responses: { ...ok(202, ref('Delivery'), 'Queued'), ...errors(401, 403, 404, 409, 429) } } },
};
// The release-marker header is its own, not the shared optional one.
delete paths['/api/v1/projects/{project_id}/release-markers/deploy'].post.parameters[0].$ref;

const anyObject = { type: 'object' };
const schemas = {
  Error: obj({ error: obj({ code: str, message: str, request_id: str, retryable: { type: 'boolean' }, details: anyObject }, ['code', 'message', 'request_id', 'retryable', 'details']) }, ['error']),
  ProjectCreated: obj({ project_id: str, name: str, plan: str, owner_key: obj({ id: str, key: str, prefix: str }) }),
  Key: obj({ id: str, prefix: str, type: str, name: nullable(str), plan: str, rate_limit_per_minute: nullable({ type: 'integer' }), status: { enum: ['active', 'revoked'] }, created_at: str, revoked_at: nullable(str) }),
  KeyCreated: { allOf: [ref('Key'), obj({ key: str })] },
  Me: obj({ key_id: str, prefix: str, type: str, project_id: str, plan: str, rate_limit: obj({ limit: { type: 'integer' }, remaining: { type: 'integer' }, reset: str }), quota: obj({ used: { type: 'integer' }, limit: { type: 'integer' }, resets_at: str }) }),
  KeyStats: obj({ key_id: str, days: { type: 'integer' }, total: { type: 'integer' }, error_share: { type: 'number' }, daily: { type: 'array', items: anyObject }, top_endpoints: { type: 'array', items: anyObject } }),
  AuditRow: anyObject,
  Archive: obj({ date: str, objects: { type: 'integer', description: 'gzip objects (chunks of up to 5,000 rows) the day is stored in' }, size: { type: 'integer', description: 'bytes, all objects of the day' }, uploaded_at: str }),
  Contact: obj({ id: str, name: nullable(str), phone: nullable(str), email: nullable(str), external_id: nullable(str), created_at: str }),
  Message: obj({ id: str, contact_id: str, text: str, status: { const: 'queued' }, created_at: str }),
  BulkResult: obj({ created: { type: 'integer' }, failed: { type: 'integer' }, results: { type: 'array', items: anyObject } }),
  ReleaseMarker: obj({ id: str, project_id: str, version: str, ts: {}, environment: nullable(str), commit: nullable(str), created_at: str }),
  TrackItem: obj({ event_id: str, event: str, anonymous_id: str, user_id: str, timestamp: {}, properties: anyObject }, ['event']),
  TrackResult: obj({ accepted: { type: 'array', items: anyObject }, duplicates: { type: 'array', items: anyObject }, rejected: { type: 'array', items: anyObject } }),
  Webhook: obj({ id: str, url: str, events: { type: 'array', items: str }, status: str, disabled_reason: nullable(str), created_at: str }),
  WebhookCreated: { allOf: [ref('Webhook'), obj({ secret: str })] },
  Delivery: anyObject,
  DeadLetter: obj({ id: str, queue: str, body: { type: 'string', description: 'the message body as sent' }, first_failed_at: str, dead_at: str, last_error: nullable(str),
    attempts: { type: 'integer' }, status: { enum: ['dead', 'redriven'] }, redriven_at: nullable(str) }),
};
const codes = { 400: 'Malformed JSON, a bad field, or IDEMPOTENCY_KEY_REQUIRED', 401: 'INVALID_API_KEY', 403: 'FORBIDDEN',
  404: 'NOT_FOUND', 409: 'IDEMPOTENCY_KEY_REUSED or IDEMPOTENCY_KEY_IN_USE (Retry-After: 1)', 413: 'PAYLOAD_TOO_LARGE',
  422: 'VALIDATION_ERROR (semantic, or a bad or repeated Idempotency-Key)', 429: 'RATE_LIMIT_EXCEEDED (Retry-After), QUOTA_EXCEEDED or TRIAL_QUOTA_EXCEEDED',
  500: 'INTERNAL_ERROR (nothing accepted; retry)' };
const doc = {
  openapi: '3.1.0',
  info: { title: 'Gatehouse', version: '1.0.0', description: 'Public-API edge gateway. Errors follow one schema; every response carries X-Request-Id; authenticated ones carry the rate-limit headers. HEAD is served wherever GET is (same status and headers, no body; it counts against the rate limit and is audited like a GET).' },
  servers: [{ url: '/' }],
  security: [{ apiKey: [] }],
  paths,
  components: {
    securitySchemes: {
      apiKey: { type: 'http', scheme: 'bearer', description: 'An API key: gh_<o|s|b|c>_…' },
      adminToken: { type: 'http', scheme: 'bearer', description: 'ADMIN_TOKEN' },
    },
    parameters: { IdempotencyKey: { name: 'Idempotency-Key', in: 'header', required: false, description: '1–255 visible ASCII characters, no comma; replays the first 2xx for 24 h', schema: { type: 'string', minLength: 1, maxLength: 255 } } },
    headers: {
      'X-Request-Id': { schema: { type: 'string', format: 'uuid' } },
      'X-RateLimit-Limit': { schema: { type: 'integer' } },
      'X-RateLimit-Remaining': { schema: { type: 'integer' } },
      'X-RateLimit-Reset': { description: 'Unix seconds of the window end', schema: { type: 'integer' } },
      'RateLimit-Policy': { schema: { type: 'string', example: '"minute";q=30;w=60' } },
      'RateLimit': { schema: { type: 'string', example: '"minute";r=29;t=55' } },
    },
    responses: Object.fromEntries(Object.entries(codes).map(([c, d]) => [`E${c}`, { description: d, content: json(ref('Error')) }])),
    schemas,
  },
};
writeFileSync(new URL('../public/openapi.json', import.meta.url), JSON.stringify(doc, null, 1) + '\n');
console.log(`public/openapi.json: ${Object.keys(paths).length} paths`);
